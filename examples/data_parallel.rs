//! DataParallel: a small MLP's forward pass split over every device, one thread per
//! device, checked batch by batch against the same forward pass on one device.
//!
//! Runs on the host backend (two simulated GPUs by default; `LOCUS_HOST_DEVICES=4` for
//! four) and on a GPU machine, where one GPU makes a DataParallel of one:
//!     cargo run --release --example data_parallel

use std::process::ExitCode;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use locus::parallel::{DataParallel, Module};
use locus::{devices, Cpu, Cuda, Device, Tensor, ToDevice};

const BATCHES: usize = 40;
const FEATURES: usize = 32;
const HIDDEN: usize = 64;
const CLASSES: usize = 10;
/// The largest difference allowed between the two forward passes: the host backend
/// gives bit-equal results, a GPU's matmul may round a split batch differently.
const TOLERANCE: f32 = 1e-4;

/// `x @ w + b`.
#[derive(ToDevice)]
struct Linear<D: Device> {
    w: Tensor<D>,
    b: Tensor<D>,
}

impl Linear<Cuda<0>> {
    /// Uniform weights in `±1/sqrt(inputs)`, as PyTorch initialises `nn.Linear`.
    fn new(inputs: usize, outputs: usize, seed: u64) -> locus::Result<Self> {
        let bound = 1.0 / (inputs as f32).sqrt();
        let uniform = |shape: &[usize], seed| (Tensor::<Cuda<0>>::rand(shape, seed)? - 0.5)? * (2.0 * bound);
        Ok(Linear { w: uniform(&[inputs, outputs], seed)?, b: uniform(&[outputs], seed + 1)? })
    }
}

impl<D: Device> Module<D> for Linear<D> {
    fn forward(&self, x: &Tensor<D>) -> locus::Result<Tensor<D>> {
        x.matmul(&self.w)? + &self.b
    }
}

/// Two layers with a relu between.
#[derive(ToDevice)]
struct Mlp<D: Device> {
    hidden: Linear<D>,
    out: Linear<D>,
}

impl<D: Device> Module<D> for Mlp<D> {
    fn forward(&self, x: &Tensor<D>) -> locus::Result<Tensor<D>> {
        self.out.forward(&self.hidden.forward(x)?.relu()?)
    }
}

fn max_abs_diff(a: &Tensor<Cuda<0>>, b: &Tensor<Cuda<0>>) -> locus::Result<f32> {
    let (a, b) = (a.to_vec()?, b.to_vec()?);
    Ok(a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max))
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("data_parallel: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let ids = devices()?;
    let names: Vec<String> = ids.iter().map(|d| d.to_string()).collect();
    println!("backend: {}; DataParallel over {} device(s): {}", locus::backend_name()?, ids.len(), names.join(", "));

    let model = Mlp { hidden: Linear::new(FEATURES, HIDDEN, 1)?, out: Linear::new(HIDDEN, CLASSES, 3)? };
    // Replicas on every device; outputs gathered on cuda:0, where the model lives.
    let dp = DataParallel::new(model, &ids, Cuda::<0>)?;
    let model = dp.module();

    // Warm up both paths (kernels compile and cuBLAS starts on first use) so that the
    // times below compare steady states.
    let warm = Tensor::<Cpu>::rand([8, FEATURES], 0)?;
    dp.forward(&warm)?;
    model.forward(&warm.to::<Cuda<0>>()?)?;

    let bar = ProgressBar::new(BATCHES as u64);
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} batches  {msg}") {
        bar.set_style(style);
    }
    let (mut worst, mut rows_seen) = (0.0f32, 0);
    let (mut parallel_time, mut single_time) = (Duration::ZERO, Duration::ZERO);
    for i in 0..BATCHES {
        // Uneven batch sizes, from 1 row (fewer rows than devices) to 97.
        let rows = 1 + (i * 37) % 97;
        let x = Tensor::<Cpu>::rand([rows, FEATURES], 100 + i as u64)?;

        let start = Instant::now();
        let y = dp.forward(&x)?;
        parallel_time += start.elapsed();

        let start = Instant::now();
        let single = model.forward(&x.to::<Cuda<0>>()?)?;
        single_time += start.elapsed();

        if y.shape() != [rows, CLASSES] {
            return Err(
                format!("batch {i}: DataParallel gave shape {:?}, expected [{rows}, {CLASSES}]", y.shape()).into()
            );
        }
        worst = worst.max(max_abs_diff(&y, &single)?);
        rows_seen += rows;
        bar.set_message(format!("max |diff| {worst:.2e}"));
        bar.inc(1);
    }
    bar.finish();

    println!(
        "{BATCHES} batches, {rows_seen} rows: DataParallel {:.1} ms, one device {:.1} ms",
        parallel_time.as_secs_f64() * 1e3,
        single_time.as_secs_f64() * 1e3
    );
    println!("max abs difference between DataParallel and one device: {worst:e} (tolerance {TOLERANCE:e})");
    if worst > TOLERANCE {
        return Err(format!("DataParallel differs from the single-device forward by {worst:e} > {TOLERANCE:e}").into());
    }
    Ok(())
}
