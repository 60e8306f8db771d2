//! A first training loop: linear regression by SGD, its gradients computed by autograd.
//! A `Loader` of (x, y) pairs brings each batch to cuda:0, where the model's parameters
//! live; `loss.backward()` gives each parameter its gradient on that device, and `Sgd`
//! steps them. The loop ends by checking that the learned weights are those the data was
//! made from.
//!
//! Runs on the host backend and on a GPU machine:
//!     cargo run --release --example train_regression

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use locus::nn::{self, Module};
use locus::optim::Sgd;
use locus::{Cpu, Cuda, Device, Loader, Param, Parameters, Tensor};

const SAMPLES: usize = 4096;
const FEATURES: usize = 8;
const OUTPUTS: usize = 2;
const BATCH: usize = 256;
const EPOCHS: u64 = 10;
const LEARNING_RATE: f32 = 0.5;
/// The noise added to the targets is uniform in `±NOISE`.
const NOISE: f32 = 0.01;
/// How far each learned weight may be from the truth.
const TOLERANCE: f32 = 1e-2;

/// The weights the data is made from, `[FEATURES, OUTPUTS]` row by row.
#[rustfmt::skip]
const W_TRUE: [f32; FEATURES * OUTPUTS] = [
     1.5, -0.5,
    -2.0,  0.25,
     0.75, 1.0,
     0.0, -1.25,
     0.5,  2.0,
    -1.0, -0.75,
     1.25, 0.0,
    -0.25, 1.5,
];
const B_TRUE: [f32; OUTPUTS] = [0.5, -1.0];

/// `x @ w + b`.
#[derive(Parameters)]
struct Linear<D: Device> {
    w: Param<D>,
    b: Param<D>,
}

impl<D: Device> Module<D> for Linear<D> {
    fn forward(&self, x: &Tensor<D>) -> locus::Result<Tensor<D>> {
        x.matmul(&self.w)? + &*self.b
    }
}

/// `SAMPLES` inputs uniform in `[-1, 1)` and their targets `x @ W_TRUE + B_TRUE + noise`.
fn synthetic_data() -> locus::Result<(Tensor<Cpu>, Tensor<Cpu>)> {
    let x = ((Tensor::<Cpu>::rand([SAMPLES, FEATURES], 1)? - 0.5)? * 2.0)?;
    let w = Tensor::<Cpu>::from_slice(&W_TRUE, [FEATURES, OUTPUTS])?;
    let b = Tensor::<Cpu>::from_slice(&B_TRUE, [OUTPUTS])?;
    let noise = ((Tensor::<Cpu>::rand([SAMPLES, OUTPUTS], 2)? - 0.5)? * (2.0 * NOISE))?;
    let y = ((x.matmul(&w)? + &b)? + &noise)?;
    Ok((x, y))
}

fn max_abs_diff(learned: &Tensor<Cuda<0>>, truth: &[f32]) -> locus::Result<f32> {
    Ok(learned.to_vec()?.iter().zip(truth).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max))
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("train_regression: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    println!("backend: {}", locus::backend_name()?);

    // In an Arc, every epoch's loader shares the data instead of copying it.
    let (inputs, targets) = synthetic_data()?;
    let (inputs, targets) = (Arc::new(inputs), Arc::new(targets));

    // A linear model can start at zero. Its parameters live on cuda:0, and so do their
    // gradients and the optimizer.
    let mut model = Linear {
        w: Param::new(Tensor::<Cuda<0>>::zeros([FEATURES, OUTPUTS])?),
        b: Param::new(Tensor::zeros([OUTPUTS])?),
    };
    let mut opt = Sgd::new(LEARNING_RATE as f64);

    let batches = SAMPLES.div_ceil(BATCH) as u64;
    let bar = ProgressBar::new(EPOCHS * batches);
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} batches  {msg}") {
        bar.set_style(style);
    }
    let start = Instant::now();
    for epoch in 0..EPOCHS {
        // A new loader each epoch, shuffled anew from the seed by `.epoch(..)`.
        let loader = Loader::from_pairs(Arc::clone(&inputs), Arc::clone(&targets), BATCH, Some(7))?
            .epoch(epoch)
            .to::<Cuda<0>>()?;
        // The squared errors add up on the device: one read back per epoch, not per batch.
        let mut squared_error = Tensor::<Cuda<0>>::zeros([])?;
        for batch in loader {
            let (x, y) = batch?;
            let err = (model.forward(&x)? - &y)?;
            squared_error = (squared_error + err.detach().square()?.sum()?)?;
            // The step: gradients of the mean squared error, then SGD.
            nn::zero_grad(&model);
            err.square()?.mean()?.backward()?;
            opt.step(&mut model)?;
            bar.inc(1);
        }
        let loss = squared_error.item()? / (SAMPLES * OUTPUTS) as f32;
        bar.set_message(format!("epoch {} loss {loss:.3e}", epoch + 1));
        bar.suspend(|| println!("epoch {:>2}: loss {loss:.3e}", epoch + 1));
    }
    bar.finish();
    println!("{EPOCHS} epochs of {SAMPLES} samples in {:.2} s", start.elapsed().as_secs_f64());
    // Uniform noise in ±NOISE has variance NOISE²/3: the lowest loss a perfect fit gets.
    println!("the loss levels off at the noise's variance, {:.3e}", NOISE * NOISE / 3.0);

    let (w_err, b_err) = (max_abs_diff(&model.w, &W_TRUE)?, max_abs_diff(&model.b, &B_TRUE)?);
    println!("learned w = {:.3?}", model.w.to_vec()?);
    println!("true    w = {W_TRUE:.3?}");
    println!("learned b = {:.3?}, true b = {B_TRUE:.3?}", model.b.to_vec()?);
    println!("max |learned - true|: w {w_err:.1e}, b {b_err:.1e} (tolerance {TOLERANCE:e})");
    if w_err > TOLERANCE || b_err > TOLERANCE {
        return Err(
            format!("the learned weights are off the truth by up to {:e} > {TOLERANCE:e}", w_err.max(b_err)).into()
        );
    }
    Ok(())
}
