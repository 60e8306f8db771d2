//! One SGD step of a small MLP as a CUDA graph: the forward pass, the backward pass of
//! autograd and the update, captured once and replayed each step, against the same
//! step run eagerly op by op. Both runs start from the same weights and see the same
//! batches; the example checks that they end with the same weights and losses, and
//! prints the time per step of each.
//!
//! The model is `relu(x @ w1 + b1) @ w2 + b2`, 64 → 128 → 10, on batches of one sample,
//! fit by squared error to a random linear teacher. A graph cannot write its inputs in
//! place: its outputs are the new weights, copied back into the weight inputs after each
//! replay (`Graph::io` and `InputMut::copy_from_output`: one device copy each).
//!
//! Then the same MLP as `nn` layers with AdamW, eagerly and as a `GraphedStep` (the whole
//! step, the update included, as one graph, the weights and moments updated in place):
//! the same losses and weights again.
//!
//! Runs on the host backend and on a GPU machine (`STEPS=1000` for more steps):
//!     cargo run --release --example graph_step

use std::process::ExitCode;
use std::time::Instant;

use locus::{on_stream, Cuda, Graph, Param, Stream, Tensor};

type G = Cuda<0>;

const IN: usize = 64;
const HIDDEN: usize = 128;
const OUT: usize = 10;
const LEARNING_RATE: f32 = 0.03;
/// How far the eager and graph runs may be apart, weight by weight and loss by loss.
const TOLERANCE: f32 = 1e-5;

/// The weights of the MLP.
struct Params {
    w1: Tensor<G>,
    b1: Tensor<G>,
    w2: Tensor<G>,
    b2: Tensor<G>,
}

impl Params {
    /// Uniform in `±1/sqrt(fan_in)`, from fixed seeds.
    fn init() -> locus::Result<Self> {
        let uniform = |shape: &[usize], fan_in: usize, seed: u64| -> locus::Result<Tensor<G>> {
            let bound = 1.0 / (fan_in as f32).sqrt();
            (Tensor::<G>::rand(shape, seed)? - 0.5)? * (2.0 * bound)
        };
        Ok(Params {
            w1: uniform(&[IN, HIDDEN], IN, 1)?,
            b1: uniform(&[HIDDEN], IN, 2)?,
            w2: uniform(&[HIDDEN, OUT], HIDDEN, 3)?,
            b2: uniform(&[OUT], HIDDEN, 4)?,
        })
    }

    fn to_vec(&self) -> locus::Result<Vec<f32>> {
        let mut all = self.w1.to_vec()?;
        for t in [&self.b1, &self.w2, &self.b2] {
            all.extend(t.to_vec()?);
        }
        Ok(all)
    }
}

/// One SGD step on the batch `(x, target)`: the new weights and the loss before the step,
/// `loss = ½·Σ(y − target)²`. The eager run calls it; the graph captures it.
fn sgd_step(
    x: &Tensor<G>,
    target: &Tensor<G>,
    w1: &Tensor<G>,
    b1: &Tensor<G>,
    w2: &Tensor<G>,
    b2: &Tensor<G>,
) -> locus::Result<(Params, Tensor<G>)> {
    // The weights as parameters of this step: autograd computes their gradients.
    let p = [w1, b1, w2, b2].map(|t| Param::new(t.clone()));
    let h = (x.matmul(&p[0])? + &*p[1])?; // [1, HIDDEN]
    let y = (h.relu()?.matmul(&p[2])? + &*p[3])?; // [1, OUT]
    let loss = ((&y - target)?.square()?.sum()? * 0.5)?;
    loss.backward()?;

    // The update, recording nothing.
    let _off = locus::no_grad();
    let step = |p: &Param<G>| -> locus::Result<Tensor<G>> {
        let g = p.grad().ok_or_else(|| locus::Error::Backward { reason: "a weight got no gradient".into() })?;
        &p.detach() - (g * LEARNING_RATE)?
    };
    let next = Params { w1: step(&p[0])?, b1: step(&p[1])?, w2: step(&p[2])?, b2: step(&p[3])? };
    let loss = loss.detach();
    Ok((next, loss))
}

/// `steps` batches of one sample: `x` uniform in `[-1, 1)`, the target `x @ teacher`.
fn batches(steps: usize) -> locus::Result<Vec<(Tensor<G>, Tensor<G>)>> {
    let teacher = ((Tensor::<G>::rand([IN, OUT], 100)? - 0.5)? * 0.5)?;
    (0..steps)
        .map(|i| {
            let x = ((Tensor::<G>::rand([1, IN], 1000 + i as u64)? - 0.5)? * 2.0)?;
            let target = x.matmul(&teacher)?;
            Ok((x, target))
        })
        .collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max)
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("graph_step: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let steps: usize = match std::env::var("STEPS") {
        Ok(s) => s.parse().map_err(|e| format!("STEPS={s}: {e}"))?,
        Err(_) => 200,
    };
    if steps == 0 {
        return Err("STEPS must be at least 1".into());
    }
    println!("backend: {}; {steps} SGD steps of a {IN}→{HIDDEN}→{OUT} MLP on batches of 1", locus::backend_name()?);
    let stream = Stream::<G>::new()?;
    let data = batches(steps)?;
    let init = Params::init()?;

    // Eager: each step launches its 28 ops one by one. One untimed step first, so the
    // timed loop does not pay for compiling kernels.
    let (eager, eager_losses, eager_us) = on_stream(&stream, || -> locus::Result<_> {
        sgd_step(&data[0].0, &data[0].1, &init.w1, &init.b1, &init.w2, &init.b2)?;
        stream.synchronize()?;
        let start = Instant::now();
        let mut p = Params { w1: init.w1.clone(), b1: init.b1.clone(), w2: init.w2.clone(), b2: init.b2.clone() };
        let mut losses = Vec::with_capacity(steps);
        for (x, target) in &data {
            let (next, loss) = sgd_step(x, target, &p.w1, &p.b1, &p.w2, &p.b2)?;
            p = next;
            losses.push(loss);
        }
        stream.synchronize()?;
        Ok((p, losses, start.elapsed().as_secs_f64() * 1e6 / steps as f64))
    })?;

    // Graph: the batch, the target and the weights are its inputs; its outputs are the
    // new weights and the loss. The inputs start as clones of `init`: a capture gives an
    // input that shares its memory a copy of its own, so `init` is never written.
    let (mut x, mut target) = (Tensor::<G>::zeros([1, IN])?, Tensor::<G>::zeros([1, OUT])?);
    let (mut w1, mut b1, mut w2, mut b2) = (init.w1.clone(), init.b1.clone(), init.w2.clone(), init.b2.clone());
    let start = Instant::now();
    let mut graph = Graph::capture(
        &stream,
        (&mut x, &mut target, &mut w1, &mut b1, &mut w2, &mut b2),
        |(x, target, w1, b1, w2, b2)| {
            let (next, loss) = sgd_step(x, target, w1, b1, w2, b2)?;
            Ok((next.w1, next.b1, next.w2, next.b2, loss))
        },
    )?;
    let capture_us = start.elapsed().as_secs_f64() * 1e6;

    let (graph_weights, graph_losses, graph_us) = on_stream(&stream, || -> locus::Result<_> {
        // One untimed replay (on whatever the inputs hold), then the weights back to `init`.
        graph.replay()?;
        {
            let (_, _, mut w1, mut b1, mut w2, mut b2) = graph.inputs_mut();
            w1.copy_from(&init.w1)?;
            b1.copy_from(&init.b1)?;
            w2.copy_from(&init.w2)?;
            b2.copy_from(&init.b2)?;
        }
        stream.synchronize()?;
        let start = Instant::now();
        let mut losses = Vec::with_capacity(steps);
        for (x, target) in &data {
            let (mut xi, mut ti, ..) = graph.inputs_mut();
            xi.copy_from(x)?;
            ti.copy_from(target)?;
            graph.replay()?;
            // The new weights go straight from the outputs into the weight inputs (one
            // device copy each, ordered before the next replay).
            let ((w1, b1, w2, b2, loss), (_, _, mut w1i, mut b1i, mut w2i, mut b2i)) = graph.io()?;
            losses.push(loss.to_tensor()?);
            w1i.copy_from_output(&w1)?;
            b1i.copy_from_output(&b1)?;
            w2i.copy_from_output(&w2)?;
            b2i.copy_from_output(&b2)?;
        }
        let last = match graph.outputs() {
            Ok((w1, b1, w2, b2, _)) => {
                Some(Params { w1: w1.to_tensor()?, b1: b1.to_tensor()?, w2: w2.to_tensor()?, b2: b2.to_tensor()? })
            }
            Err(_) => None,
        };
        stream.synchronize()?;
        let us = start.elapsed().as_secs_f64() * 1e6 / steps as f64;
        Ok((last, losses, us))
    })?;
    drop(graph);

    let read = |losses: &[Tensor<G>]| losses.iter().map(|l| l.item()).collect::<locus::Result<Vec<f32>>>();
    let (eager_losses, graph_losses) = (read(&eager_losses)?, read(&graph_losses)?);
    let (eager, graph_weights) = (eager.to_vec()?, graph_weights.ok_or("no steps were run")?.to_vec()?);
    let loss_diff = max_abs_diff(&eager_losses, &graph_losses);
    let weight_diff = max_abs_diff(&eager, &graph_weights);
    let mean = |l: &[f32]| l.iter().sum::<f32>() / l.len() as f32;
    let tenth = steps.div_ceil(10);
    println!(
        "loss, mean of the first and last {tenth} steps: eager {:.4e} → {:.4e}, graph {:.4e} → {:.4e}",
        mean(&eager_losses[..tenth]),
        mean(&eager_losses[steps - tenth..]),
        mean(&graph_losses[..tenth]),
        mean(&graph_losses[steps - tenth..]),
    );
    println!("w1[0..4]: eager {:.6?}, graph {:.6?}", &eager[..4], &graph_weights[..4]);
    println!("max |eager - graph|: weights {weight_diff:.1e}, losses {loss_diff:.1e} (tolerance {TOLERANCE:e})");
    println!("eager: {eager_us:8.1} µs per step");
    println!(
        "graph: {graph_us:8.1} µs per step (the replay and the copies in and out: {:.2}x the speed of eager), \
         captured once in {capture_us:.0} µs",
        eager_us / graph_us
    );
    if weight_diff > TOLERANCE || loss_diff > TOLERANCE {
        return Err(format!(
            "the graph and eager runs disagree: weights by up to {weight_diff:e}, losses by up to {loss_diff:e}"
        )
        .into());
    }
    graphed_adamw(&stream, &data)
}

/// The same MLP as `nn` layers trained with AdamW, eagerly and as a `GraphedStep` (the
/// whole step, the update included, one graph; the weights and moments updated in place),
/// from the same initial weights on the same batches: the same losses step by step.
fn graphed_adamw(stream: &Stream<G>, data: &[(Tensor<G>, Tensor<G>)]) -> Result<(), Box<dyn std::error::Error>> {
    use locus::nn::{self, Linear, Module, Relu, Sequential};
    use locus::optim::AdamW;
    use locus::GraphedStep;
    let mlp = || -> locus::Result<Sequential<G>> {
        Ok(Sequential::new()
            .append(Linear::new(IN, HIDDEN, 1)?)
            .append(Relu::new())
            .append(Linear::new(HIDDEN, OUT, 2)?))
    };
    let loss_of = |m: &Sequential<G>, x: &Tensor<G>, t: &Tensor<G>| (m.forward(x)? - t)?.square()?.sum()? * 0.5;
    let (mut eager, mut eager_opt) = (mlp()?, AdamW::new(1e-3));
    let start = Instant::now();
    let eager_losses = on_stream(stream, || -> locus::Result<Vec<Tensor<G>>> {
        let mut losses = Vec::with_capacity(data.len());
        for (x, t) in data {
            nn::zero_grad(&eager);
            let loss = loss_of(&eager, x, t)?;
            loss.backward()?;
            eager_opt.step(&mut eager)?;
            losses.push(loss.detach());
        }
        stream.synchronize()?;
        Ok(losses)
    })?;
    let eager_us = start.elapsed().as_secs_f64() * 1e6 / data.len() as f64;
    let (mut model, mut opt) = (mlp()?, AdamW::new(1e-3));
    let (mut x, mut t) = (Tensor::<G>::zeros([1, IN])?, Tensor::<G>::zeros([1, OUT])?);
    let mut step = GraphedStep::capture(stream, &mut model, &mut opt, (&mut x, &mut t), |m, (x, t)| loss_of(m, x, t))?;
    let start = Instant::now();
    let mut losses = Vec::with_capacity(data.len());
    for (bx, bt) in data {
        let (mut xi, mut ti) = step.inputs_mut();
        xi.copy_from(bx)?;
        ti.copy_from(bt)?;
        losses.push(step.replay()?.to_tensor()?);
    }
    stream.synchronize()?;
    let graphed_us = start.elapsed().as_secs_f64() * 1e6 / data.len() as f64;
    drop(step);
    let read = |l: &[Tensor<G>]| l.iter().map(|l| l.item()).collect::<locus::Result<Vec<f32>>>();
    let loss_diff = max_abs_diff(&read(&eager_losses)?, &read(&losses)?);
    let mut weight_diff = 0.0f32;
    for ((_, a), (_, b)) in nn::named_parameters(&eager).into_iter().zip(nn::named_parameters(&model)) {
        weight_diff = weight_diff.max(max_abs_diff(&a.to_vec()?, &b.to_vec()?));
    }
    println!(
        "AdamW, nn layers: eager {eager_us:.1} µs per step, GraphedStep {graphed_us:.1} µs ({:.2}x); max |eager - graphed|: \
         weights {weight_diff:.1e}, losses {loss_diff:.1e}",
        eager_us / graphed_us
    );
    if weight_diff > TOLERANCE || loss_diff > TOLERANCE {
        return Err(format!(
            "GraphedStep and the eager AdamW steps disagree: weights by {weight_diff:e}, losses by {loss_diff:e}"
        )
        .into());
    }
    Ok(())
}
