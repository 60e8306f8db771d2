//! Training steps (issue 33): an MLP of 4 `Linear` layers with ReLU between, an MSE loss,
//! `backward()` and an `AdamW` step, against the same step in PyTorch eager
//! (`torch.optim.AdamW(foreach=True)`, benches/torch_baseline.py `train()`); and the same
//! step as one graph (issue 34, `GraphedStep`) against PyTorch's whole-network capture.
//!
//! A sample is `steps` whole training steps (zero_grad, forward, backward, step) and one
//! synchronize, in wall time; the row is steps per second. Every row also prints the peak
//! of `max_memory_allocated` over its samples (MiB), after the same untimed warm-up steps.

use std::time::Instant;

use locus::nn::{self, Linear, Module, Relu, Sequential};
use locus::optim::clip_grad_norm;
use locus::optim::AdamW;
use locus::{bf16, max_memory_allocated, reset_peak_memory_stats, DeviceId, Float, GraphedStep, Stream, Tensor};

use super::method::{row, samples};
use super::{sync, G};

fn mlp<T: Float>(width: usize) -> locus::Result<Sequential<G, T>> {
    let mut s = Sequential::new();
    for i in 0..4 {
        s = s.append(Linear::new(width, width, i)?);
        if i < 3 {
            s = s.append(Relu::new());
        }
    }
    Ok(s)
}

fn rows<T: Float>(name: &str, width: usize, batch: usize, steps: usize) -> locus::Result<()> {
    let model = mlp::<T>(width)?;
    let mut model = model;
    let mut opt = AdamW::<G, T>::new(1e-4);
    let x = Tensor::<G, f32>::rand([batch, width], 1)?.to_dtype::<T>()?;
    let t = Tensor::<G, f32>::rand([batch, width], 2)?.to_dtype::<T>()?;
    let step = || -> locus::Result<()> {
        nn::zero_grad(&model);
        let loss = (model.forward(&x)? - &t)?.square()?.mean()?;
        loss.backward()?;
        opt.step(&mut model)
    };
    let note = format!(
        "4 x Linear({width}) + ReLU, MSE, backward, AdamW, {batch} rows, {} per step, {steps} steps + synchronize per sample, wall",
        T::DTYPE
    );
    step_rows(name, steps, &note, step, sync)
}

/// The rows of a training step: one untimed `step` (the caller's warm-up done), then
/// samples of `steps` steps and one `wait` each, in steps per second, and the peak of
/// `max_memory_allocated` over them.
fn step_rows(
    name: &str,
    steps: usize,
    note: &str,
    mut step: impl FnMut() -> locus::Result<()>,
    wait: impl Fn(),
) -> locus::Result<()> {
    step()?;
    wait();
    reset_peak_memory_stats(DeviceId::Cuda(0))?;
    let per_sample = samples(|| {
        let start = Instant::now();
        for _ in 0..steps {
            step().unwrap();
        }
        wait();
        steps as f64 / start.elapsed().as_secs_f64()
    });
    let peak = max_memory_allocated(DeviceId::Cuda(0))? as f64 / (1 << 20) as f64;
    row(&format!("{name}_steps"), &per_sample, "steps/s", note);
    row(&format!("{name}_peak"), &[peak], "MiB", "max_memory_allocated over the timed samples");
    Ok(())
}

/// The same step captured once as a graph (`GraphedStep`) and replayed, against PyTorch's
/// whole-network capture (`torch.cuda.graph` around forward, backward and
/// `AdamW(capturable=True)`). Each step copies the batch into the static inputs, on both
/// sides; one eager step first (PyTorch warms up before capturing too).
fn graphed_rows<T: Float>(name: &str, width: usize, batch: usize, steps: usize) -> locus::Result<()> {
    let mut model = mlp::<T>(width)?;
    let mut opt = AdamW::<G, T>::new(1e-4);
    let x = Tensor::<G, f32>::rand([batch, width], 1)?.to_dtype::<T>()?;
    let t = Tensor::<G, f32>::rand([batch, width], 2)?.to_dtype::<T>()?;
    nn::zero_grad(&model);
    (model.forward(&x)? - &t)?.square()?.mean()?.backward()?;
    opt.step(&mut model)?;
    let stream = Stream::<G>::new()?;
    let (mut xs, mut ts) = (Tensor::<G, T>::zeros([batch, width])?, Tensor::<G, T>::zeros([batch, width])?);
    let mut step = GraphedStep::capture(&stream, &mut model, &mut opt, (&mut xs, &mut ts), |m, (x, t)| {
        (m.forward(x)? - t)?.square()?.mean()
    })?;
    let one = || -> locus::Result<()> {
        let (mut xi, mut ti) = step.inputs_mut();
        xi.copy_from(&x)?;
        ti.copy_from(&t)?;
        step.replay().map(drop)
    };
    let note = format!(
        "GraphedStep: 4 x Linear({width}) + ReLU, MSE, backward, AdamW as one graph, {batch} rows, {}, batch copied in + replay per step, {steps} steps + synchronize per sample, wall",
        T::DTYPE
    );
    step_rows(name, steps, &note, one, || stream.synchronize().unwrap())
}

/// One eager step of tiny_gpt on a fixed batch (forward, `cross_entropy`, backward,
/// clipping, AdamW), as a closure over its own model and optimizer.
fn tiny_gpt_step() -> locus::Result<impl FnMut() -> locus::Result<()>> {
    use super::tiny_gpt_model::{Gpt, BATCH, CONTEXT, VOCAB};
    let mut model = Gpt::new_on(G::default(), 1)?;
    let mut opt = AdamW::<G>::new(3e-3).weight_decay(0.01);
    // Fixed bytes (a stride through 0..256), as the PyTorch side makes them.
    let n = BATCH * CONTEXT;
    let bytes = Tensor::<G>::from_vec((0..n).map(|i| ((i * 37 + 11) % 256) as f32).collect(), [BATCH, CONTEXT])?;
    let next = Tensor::<G, i32>::from_vec((0..n).map(|i| ((i * 37 + 48) % 256) as i32).collect(), [n])?;
    Ok(move || -> locus::Result<()> {
        nn::zero_grad(&model);
        let loss = model.forward(&bytes)?.reshape([BATCH * CONTEXT, VOCAB])?.cross_entropy(&next)?;
        loss.backward()?;
        clip_grad_norm(&model, 1.0)?;
        opt.step(&mut model)
    })
}

/// `gpu train-trace PATH [STEPS]`: STEPS (default 5) eager tiny_gpt steps traced into
/// PATH, after 3 untraced ones: every op's device time, for `benches/trace_summary.py`.
pub(crate) fn tiny_gpt_trace(path: &str, steps: usize) -> locus::Result<()> {
    let mut step = tiny_gpt_step()?;
    for _ in 0..3 {
        step()?;
    }
    sync();
    locus::trace::start(path)?;
    for k in 0..steps {
        let _range = locus::range!("step {}", k);
        step()?;
    }
    sync();
    locus::trace::stop().map(drop)
}

/// tiny_gpt's training step on one GPU (the model of examples/tiny_gpt): forward,
/// `cross_entropy`, backward, clipping to norm 1, AdamW, on a fixed random batch of
/// `BATCH` sequences of `CONTEXT` bytes, against the same model and step in PyTorch eager
/// (benches/torch_baseline.py `tiny_gpt()`). A sample is `steps` steps and one
/// synchronize, in wall time; the row is tokens (bytes) per second.
pub(crate) fn tiny_gpt(steps: usize) -> locus::Result<()> {
    use super::tiny_gpt_model::{BATCH, CONTEXT};
    let mut step = tiny_gpt_step()?;
    step()?;
    sync();
    let per_sample = samples(|| {
        let start = Instant::now();
        for _ in 0..steps {
            step().unwrap();
        }
        sync();
        (steps * BATCH * CONTEXT) as f64 / start.elapsed().as_secs_f64()
    });
    let note = format!(
        "examples/tiny_gpt's model, {BATCH} x {CONTEXT} bytes: forward, cross_entropy, backward, clip_grad_norm(1), AdamW, one GPU, {steps} steps + synchronize per sample, wall"
    );
    row("tiny_gpt_tokens", &per_sample, "tokens/s", &note);
    Ok(())
}

/// tiny_gpt's step of [`tiny_gpt`] captured once as a `GraphedStep` (clipping in the
/// graph) and replayed, the byte ids, targets and causal mask its inputs, against PyTorch's
/// whole-network capture of the same step (`torch_baseline.py` `tiny_gpt_graphed()`).
/// Each step copies the batch into the static inputs, on both sides; before the timing,
/// 3 replays must take the eager steps of a twin model (losses within 1e-4), else the
/// bench fails. With `profile` (`gpu train-graph-profile`), no row: two replays alone,
/// each in an NVTX range `replay` (for `ncu --nvtx --nvtx-include replay/`).
pub(crate) fn tiny_gpt_graphed(steps: usize, profile: bool) -> locus::Result<()> {
    use super::tiny_gpt_model::{Gpt, BATCH, CONTEXT, VOCAB};
    let n = BATCH * CONTEXT;
    let ids = Tensor::<G, i32>::from_vec((0..n).map(|i| ((i * 37 + 11) % 256) as i32).collect(), [BATCH, CONTEXT])?;
    let next = Tensor::<G, i32>::from_vec((0..n).map(|i| ((i * 37 + 48) % 256) as i32).collect(), [n])?;
    let loss_of = |m: &Gpt<G>, ids: &Tensor<G, i32>, next: &Tensor<G, i32>, mask: &Tensor<G>| {
        m.logits(ids, mask)?.reshape([n, VOCAB])?.cross_entropy(next)
    };
    let (mut twin, mut twin_opt) = (Gpt::new_on(G::default(), 1)?, AdamW::<G>::new(3e-3).weight_decay(0.01));
    let (mut model, mut opt) = (Gpt::new_on(G::default(), 1)?, AdamW::<G>::new(3e-3).weight_decay(0.01));
    let stream = Stream::<G>::new()?;
    let (mut is, mut ts) = (Tensor::<G, i32>::zeros([BATCH, CONTEXT])?, Tensor::<G, i32>::zeros([n])?);
    let mut ms = model.mask().clone();
    let mut step = GraphedStep::capture_clipped(
        &stream,
        &mut model,
        &mut opt,
        (&mut is, &mut ts, &mut ms),
        1.0,
        |m, (i, t, k)| loss_of(m, i, t, k),
    )?;
    for k in 0..3 {
        nn::zero_grad(&twin);
        let want = loss_of(&twin, &ids, &next, twin.mask())?;
        want.backward()?;
        clip_grad_norm(&twin, 1.0)?;
        twin_opt.step(&mut twin)?;
        let (mut ii, mut ti, _) = step.inputs_mut();
        ii.copy_from(&ids)?;
        ti.copy_from(&next)?;
        let (got, want) = (step.replay()?.item()?, want.item()?);
        if (got - want).abs() > 1e-4 * want.abs() {
            return Err(locus::Error::InvalidArgument {
                op: "tiny_gpt_graphed",
                reason: format!("step {k}: the graphed loss {got} is not the eager {want}"),
            });
        }
    }
    if profile {
        for _ in 0..2 {
            let _range = locus::range!("replay");
            step.replay()?;
        }
        return stream.synchronize();
    }
    let mut one = || -> locus::Result<()> {
        let (mut ii, mut ti, _) = step.inputs_mut();
        ii.copy_from(&ids)?;
        ti.copy_from(&next)?;
        step.replay().map(drop)
    };
    let note = format!(
        "GraphedStep: examples/tiny_gpt's model, {BATCH} x {CONTEXT} bytes: forward, cross_entropy, backward, clip_grad_norm(1), AdamW as one graph, ids/targets copied in + replay per step, {steps} steps + synchronize per sample, wall"
    );
    let per_sample = samples(|| {
        let start = Instant::now();
        for _ in 0..steps {
            one().unwrap();
        }
        stream.synchronize().unwrap();
        (steps * n) as f64 / start.elapsed().as_secs_f64()
    });
    row("tiny_gpt_graphed_tokens", &per_sample, "tokens/s", &note);
    Ok(())
}

/// Ops per chain of the autograd rows: far below the launch queue's depth, as the
/// breakdown's batches, so the host's own time is what is timed.
const CHAIN: usize = 128;

/// What one recorded op costs backward against forward (issue 35's last target: backward
/// per op at most 1.3 times the forward op's submit): a chain of `CHAIN` multiplies of a
/// 1024-element tensor that tracks gradients by a constant tensor, each sample after a
/// synchronize. `autograd_forward_1k_submit`: host time per op of the chain as recorded
/// (the op and its tape node); `autograd_backward_1k_per_op`: host time of `backward()` on
/// its sum, per op of the chain (one `g * w` per op, the sum's and the leaf's few extra
/// spread over the chain), until `backward` returns with every kernel queued.
fn autograd_chain() -> locus::Result<()> {
    let x = locus::Param::new(Tensor::<G>::rand([1024], 1)?);
    let w = (Tensor::<G>::rand([1024], 2)? * 0.5)?;
    let chain = || -> locus::Result<Tensor<G>> {
        let mut y = (&*x * &w)?;
        for _ in 1..CHAIN {
            y = (&y * &w)?;
        }
        Ok(y)
    };
    let per_op = |t: Instant| t.elapsed().as_secs_f64() / CHAIN as f64 * 1e6;
    let forward = samples(|| {
        sync();
        let t = Instant::now();
        let y = chain().unwrap();
        let us = per_op(t);
        drop(y);
        sync();
        us
    });
    let backward = samples(|| {
        let loss = chain().and_then(|y| y.sum()).unwrap();
        sync();
        let t = Instant::now();
        loss.backward().unwrap();
        let us = per_op(t);
        sync();
        x.zero_grad();
        us
    });
    let what = format!("a chain of {CHAIN} multiplies of 1024 f32 (tracking gradients) by a constant tensor");
    row(
        "autograd_forward_1k_submit",
        &forward,
        "us/op",
        &format!("{what}: host time per op of the forward, recorded, no sync"),
    );
    row(
        "autograd_backward_1k_per_op",
        &backward,
        "us/op",
        &format!("{what}: host time of backward() on its sum until it returns, per op of the chain"),
    );
    Ok(())
}

/// The training rows.
pub(crate) fn steps() {
    autograd_chain().unwrap();
    rows::<f32>("train_mlp_f32_w4096_b512", 4096, 512, 10).unwrap();
    rows::<bf16>("train_mlp_bf16_w4096_b512", 4096, 512, 10).unwrap();
    rows::<f32>("train_mlp_f32_w256_b32", 256, 32, 100).unwrap();
    graphed_rows::<f32>("train_mlp_f32_w256_b32_graphed", 256, 32, 100).unwrap();
    graphed_rows::<f32>("train_mlp_f32_w4096_b512_graphed", 4096, 512, 10).unwrap();
    tiny_gpt(20).unwrap();
    tiny_gpt_graphed(20, false).unwrap();
}
