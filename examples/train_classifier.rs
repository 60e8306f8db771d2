//! A classifier trained in bf16 with f32 master weights, data parallel over every device,
//! with autograd: the step of a real training loop, with no gradient formula, scatter,
//! thread or reduction written by hand.
//!
//! The data is synthetic: inputs uniform in `[-1, 1)`, labelled by the largest output of
//! a fixed random linear "teacher". The model is a 2-layer MLP whose f32 weights are
//! `Param`s. Each step:
//! - a `Loader` brings a batch (f32 inputs, i32 labels) to cuda:0;
//! - `DataParallel::forward` splits it over the devices, where each replica casts its
//!   weights to bf16 and runs the forward pass in bf16 (matmuls with f32 accumulation),
//!   and gathers the f32 logits on cuda:0;
//! - `cross_entropy(..).backward()` runs back through the gather, each replica's pass on
//!   its device, and its bf16 casts, adding every replica's gradients to the f32 master
//!   weights on cuda:0 (PyTorch's `nn.DataParallel` backward);
//! - `Sgd` with momentum steps the master weights through `module_mut()`, which refreshes
//!   the replicas for the next forward.
//!
//! It prints the loss and the accuracy of every epoch, and fails unless the accuracy on
//! held-out data ends above `ACCURACY`.
//!
//! Runs on the host backend (two simulated GPUs by default; `LOCUS_HOST_DEVICES=4` for
//! four) and on a GPU machine:
//!     cargo run --release --example train_classifier

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use locus::nn::{self, init, Module};
use locus::optim::Sgd;
use locus::parallel::DataParallel;
use locus::{bf16, devices, Cpu, Cuda, Device, DeviceId, Loader, Param, Parameters, Tensor, ToDevice};

const SAMPLES: usize = 8192;
const HELD_OUT: usize = 2048;
const FEATURES: usize = 32;
const HIDDEN: usize = 128;
const CLASSES: usize = 8;
const BATCH: usize = 256;
const EPOCHS: u64 = 12;
const LEARNING_RATE: f32 = 0.2;
const MOMENTUM: f32 = 0.9;
/// The held-out accuracy the model must reach.
const ACCURACY: f32 = 0.9;

/// The f32 master weights: `relu(x @ w1 + b1) @ w2 + b2`.
#[derive(Parameters, ToDevice)]
struct Mlp<D: Device> {
    w1: Param<D>,
    b1: Param<D>,
    w2: Param<D>,
    b2: Param<D>,
}

impl Mlp<Cuda<0>> {
    /// Uniform weights in `±1/sqrt(inputs)`, as PyTorch initialises `nn.Linear`.
    fn new(seed: u64) -> locus::Result<Self> {
        let uniform = |shape: &[usize], inputs: usize, seed| {
            Ok::<_, locus::Error>(Param::new(init::fan_in_uniform_on(Cuda::<0>, shape, inputs, seed)?))
        };
        Ok(Mlp {
            w1: uniform(&[FEATURES, HIDDEN], FEATURES, seed)?,
            b1: uniform(&[HIDDEN], FEATURES, seed + 1)?,
            w2: uniform(&[HIDDEN, CLASSES], HIDDEN, seed + 2)?,
            b2: uniform(&[CLASSES], HIDDEN, seed + 3)?,
        })
    }
}

/// The model's weights in bf16, for one forward and backward pass.
struct Bf16<D: Device> {
    w1: Tensor<D, bf16>,
    b1: Tensor<D, bf16>,
    w2: Tensor<D, bf16>,
    b2: Tensor<D, bf16>,
}

impl<D: Device> Mlp<D> {
    fn bf16(&self) -> locus::Result<Bf16<D>> {
        Ok(Bf16 { w1: self.w1.to_dtype()?, b1: self.b1.to_dtype()?, w2: self.w2.to_dtype()?, b2: self.b2.to_dtype()? })
    }
}

/// The forward pass in bf16: the hidden layer before its relu, and the logits in f32.
fn forward<D: Device>(m: &Bf16<D>, x: &Tensor<D, bf16>) -> locus::Result<(Tensor<D, bf16>, Tensor<D>)> {
    let pre = (x.matmul(&m.w1)? + &m.b1)?;
    let logits = (pre.relu()?.matmul(&m.w2)? + &m.b2)?;
    Ok((pre, logits.to_dtype()?))
}

/// The module `DataParallel` runs on each device: f32 master weights in, bf16 compute,
/// f32 logits out.
impl<D: Device> Module<D> for Mlp<D> {
    fn forward(&self, x: &Tensor<D>) -> locus::Result<Tensor<D>> {
        Ok(forward(&self.bf16()?, &x.to_dtype::<bf16>()?)?.1)
    }
}

/// `SAMPLES + HELD_OUT` inputs uniform in `[-1, 1)`, labelled by the argmax of a random
/// linear map.
fn synthetic_data() -> locus::Result<(Tensor<Cpu>, Tensor<Cpu, i32>)> {
    let x = ((Tensor::<Cpu>::rand([SAMPLES + HELD_OUT, FEATURES], 1)? - 0.5)? * 2.0)?;
    let teacher = (Tensor::<Cpu>::rand([FEATURES, CLASSES], 2)? - 0.5)?;
    let labels = x.matmul(&teacher)?.argmax(1, false)?;
    Ok((x, labels))
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("train_classifier: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let ids: Vec<DeviceId> = devices()?;
    println!(
        "backend: {}; a {FEATURES}-{HIDDEN}-{CLASSES} MLP in bf16 with f32 master weights, data parallel over {} \
         device(s)",
        locus::backend_name()?,
        ids.len()
    );

    let (x, y) = synthetic_data()?;
    let (train_x, test_x) = (Arc::new(x.narrow(0, 0, SAMPLES)?), x.narrow(0, SAMPLES, HELD_OUT)?);
    let (train_y, test_y) = (Arc::new(y.narrow(0, 0, SAMPLES)?), y.narrow(0, SAMPLES, HELD_OUT)?);

    let mut dp = DataParallel::new(Mlp::new(10)?, &ids, Cuda::<0>)?;
    let mut opt = Sgd::new(LEARNING_RATE as f64).momentum(MOMENTUM as f64);

    let batches = SAMPLES.div_ceil(BATCH) as u64;
    let bar = ProgressBar::new(EPOCHS * batches);
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} batches  {msg}") {
        bar.set_style(style);
    }
    let start = Instant::now();
    for epoch in 0..EPOCHS {
        let loader = Loader::from_pairs(Arc::clone(&train_x), Arc::clone(&train_y), BATCH, Some(7))?
            .epoch(epoch)
            .to::<Cuda<0>>()?;
        // Loss and hits add up on cuda:0: one read back per epoch, not per batch.
        let mut loss_sum = Tensor::<Cuda<0>>::zeros([])?;
        let mut correct = Tensor::<Cuda<0>, i32>::zeros([])?;
        for batch in loader {
            let (x, y) = batch?;
            let rows = x.shape()[0];
            nn::zero_grad(dp.module());
            let logits = dp.forward(&x)?;
            let loss = logits.cross_entropy(&y)?;
            loss.backward()?;
            opt.step(dp.module_mut())?;
            loss_sum = (loss_sum + (loss.detach() * rows as f32)?)?;
            correct = (correct + logits.argmax(1, false)?.eq(&y)?.to_dtype::<i32>()?.sum()?)?;
            bar.inc(1);
        }
        let loss = loss_sum.item()? / SAMPLES as f32;
        let accuracy = correct.item()? as f32 / SAMPLES as f32;
        bar.set_message(format!("epoch {} loss {loss:.4} accuracy {:.1}%", epoch + 1, accuracy * 100.0));
        bar.suspend(|| println!("epoch {:>2}: loss {loss:.4}, accuracy {:.1}%", epoch + 1, accuracy * 100.0));
    }
    bar.finish();
    println!("{EPOCHS} epochs of {SAMPLES} samples in {:.2} s", start.elapsed().as_secs_f64());

    // Held-out accuracy, in bf16 on cuda:0 as in training.
    let model = dp.into_inner();
    let _eval = locus::no_grad();
    let (_, logits) = forward(&model.bf16()?, &test_x.to::<Cuda<0>>()?.to_dtype()?)?;
    let hits = logits.argmax(1, false)?.eq(&test_y.to::<Cuda<0>>()?)?.to_dtype::<i32>()?.sum()?.item()?;
    let accuracy = hits as f32 / HELD_OUT as f32;
    println!(
        "held-out accuracy: {:.1}% ({hits} of {HELD_OUT}); required above {:.0}%",
        accuracy * 100.0,
        ACCURACY * 100.0
    );
    if accuracy <= ACCURACY {
        return Err(format!("the held-out accuracy {accuracy} is not above {ACCURACY}").into());
    }
    Ok(())
}
