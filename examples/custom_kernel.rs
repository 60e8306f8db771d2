//! A kernel of your own next to the built-in ops: `y = gelu(x + bias)` (GELU in its tanh
//! form, bias broadcast over the rows) as one fused CUDA kernel declared with
//! `#[locus::kernel]`, against the same math in 13 built-in ops. Both run on the same
//! inputs; the example checks that they agree and prints the median time of each.
//!
//! The kernel's source is `examples/kernels/bias_gelu.cu`; its Rust declaration is
//! checked against the C one when this example compiles. On the host backend the launch
//! runs the Rust fallback `bias_gelu_host`, queued on the stream as any op is.
//!
//! Runs on the host backend and on a GPU machine (`ROWS=8192` for more rows, `REPS` for
//! more repetitions):
//!     cargo run --release --example custom_kernel

use std::process::ExitCode;
use std::time::{Duration, Instant};

use locus::{kernel, synchronize, Cuda, Device, DeviceId, Tensor};

type G = Cuda<0>;

const COLS: usize = 1024;
/// How far the fused and op-by-op results may be apart (they round differently: `tanhf`
/// against `exp`).
const TOLERANCE: f32 = 1e-5;
const SQRT_2_OVER_PI: f32 = 0.797_884_6;

/// The host backend's version of the kernel, the same math in Rust.
fn bias_gelu_host(x: &[f32], bias: &[f32], y: &mut [f32], rows: u64, cols: u64) {
    let n = (rows * cols) as usize;
    for (i, (y, x)) in y[..n].iter_mut().zip(&x[..n]).enumerate() {
        let z = x + bias[i % cols as usize];
        let u = SQRT_2_OVER_PI * (z + 0.044715 * z * z * z);
        *y = 0.5 * z * (1.0 + u.tanh());
    }
}

/// `y = gelu(x + bias)` for a `[rows, cols]` x and a `[cols]` bias.
#[kernel(source = "examples/kernels/bias_gelu.cu", host = bias_gelu_host)]
fn bias_gelu<D: Device>(x: &Tensor<D>, bias: &Tensor<D>, y: &mut Tensor<D>, rows: u64, cols: u64);

/// The same in built-in ops; `tanh(u) = 1 - 2 / (exp(2u) + 1)`.
fn bias_gelu_ops<D: Device>(x: &Tensor<D>, bias: &Tensor<D>) -> locus::Result<Tensor<D>> {
    let z = (x + bias)?;
    let u = ((&z + (z.pow(3.0)? * 0.044715)?)? * SQRT_2_OVER_PI)?;
    let tanh = (1.0 - (2.0 / ((u * 2.0)?.exp()? + 1.0)?)?)?;
    (&z * 0.5)? * (tanh + 1.0)?
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// The median of `reps` timings of `f`, each waited for on the device.
fn median(reps: usize, mut f: impl FnMut() -> locus::Result<()>) -> locus::Result<Duration> {
    let mut times = Vec::with_capacity(reps);
    for _ in 0..reps {
        let start = Instant::now();
        f()?;
        synchronize(DeviceId::Cuda(0))?;
        times.push(start.elapsed());
    }
    times.sort();
    Ok(times[times.len() / 2])
}

fn run() -> locus::Result<()> {
    let on_gpu = locus::backend_name()? == "cuda";
    let rows = env("ROWS", if on_gpu { 4096 } else { 256 });
    let reps = env("REPS", if on_gpu { 50 } else { 10 }).max(1);
    let x = ((Tensor::<G>::rand([rows, COLS], 1)? - 0.5)? * 8.0)?;
    let bias = (Tensor::<G>::rand([COLS], 2)? - 0.5)?;
    let mut y = Tensor::<G>::zeros([rows, COLS])?;
    let (r, c) = (rows as u64, COLS as u64);

    // Warm up: the first launch compiles the kernel with NVRTC on a GPU.
    bias_gelu(&x, &bias, &mut y, r, c).launch()?;
    let reference = bias_gelu_ops(&x, &bias)?;
    let worst = y.to_vec()?.iter().zip(reference.to_vec()?).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    if worst > TOLERANCE {
        return Err(locus::Error::InvalidArgument {
            op: "custom_kernel",
            reason: format!("the fused kernel and the built-in ops differ by {worst:e} (tolerance {TOLERANCE:e})"),
        });
    }

    let fused = median(reps, || bias_gelu(&x, &bias, &mut y, r, c).launch())?;
    let ops = median(reps, || bias_gelu_ops(&x, &bias).map(drop))?;
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    println!(
        "y = gelu(x + bias) over [{rows}, {COLS}] on cuda:0 ({} backend), median of {reps}:",
        locus::backend_name()?
    );
    println!("  fused #[locus::kernel]: {:>10.1} µs", us(fused));
    println!("  13 built-in ops:        {:>10.1} µs  ({:.1}× the fused kernel)", us(ops), us(ops) / us(fused));
    println!("  results agree within {worst:.1e}");
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("custom_kernel: {e}");
            ExitCode::FAILURE
        }
    }
}
