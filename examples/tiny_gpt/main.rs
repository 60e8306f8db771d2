//! A small causal transformer trained on the text of locus's own README and docs, byte
//! by byte, with autograd, on every device at once.
//!
//! The model: token and position embeddings, `LAYERS` blocks of (LayerNorm, multi-head
//! causal self-attention from batched matmuls and a masked softmax, LayerNorm, a GELU MLP)
//! with residual connections, a final LayerNorm and a linear head over the 256 byte
//! values. `DataParallel` splits each batch of sequences over the devices; the loss is
//! `cross_entropy` of the next byte; AdamW with warm-up and cosine decay, gradients
//! clipped to norm 1. Halfway, the model and the optimizer are saved to safetensors and
//! loaded into a fresh model and optimizer, whose next loss must be the uninterrupted
//! run's. At the end it prints text sampled from the model, and fails unless the loss
//! fell below `TARGET`.
//!
//! Under torchrun (`RANK` set) it runs one process per device with
//! `DistributedDataParallel` instead, each rank on its share of every batch, and checks
//! that every rank ends with the same weights, bit for bit.
//!
//! Runs on the host backend and on a GPU machine (`TINY_GPT_STEPS=2000` for a longer run):
//!     cargo run --release --example tiny_gpt
//!     torchrun --nproc-per-node=2 --no-python target/release/examples/tiny_gpt

use std::process::ExitCode;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use locus::nn::{self, Module};
use locus::optim::{clip_grad_norm, AdamW, CosineWithWarmup};
use locus::parallel::DataParallel;
use locus::{devices, Cpu, Cuda, Device, Tensor};

mod model;

use model::{Gpt, BATCH, CONTEXT, HEADS, LAYERS, VOCAB, WIDTH};

/// The loss (nats per byte) the run must end below: a model that learned nothing stays
/// near ln 256 ≈ 5.5. `TINY_GPT_TARGET` sets another (a short run's).
const TARGET: f32 = 3.0;

/// The last steps whose mean loss both modes print (and under torchrun, judge).
const TAIL: usize = 10;

fn target() -> Result<f32, Box<dyn std::error::Error>> {
    match std::env::var("TINY_GPT_TARGET") {
        Ok(v) => match v.parse::<f32>() {
            Ok(t) if t.is_finite() && t > 0.0 => Ok(t),
            _ => Err(format!("TINY_GPT_TARGET={v:?} is not a loss above 0").into()),
        },
        Err(_) => Ok(TARGET),
    }
}

/// The corpus: the project's own prose, built into the binary.
const CORPUS: &[&[u8]] = &[include_bytes!("../../README.md"), include_bytes!("../../docs/DESIGN.md")];

/// A deterministic stream of batch offsets (a 64-bit LCG).
struct Offsets(u64);

impl Offsets {
    fn next(&mut self, below: usize) -> usize {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) as usize) % below
    }
}

/// An input batch (bytes as f32) and its targets (the next bytes, flattened).
type Batch<D> = (Tensor<D>, Tensor<D, i32>);

/// `BATCH` windows of the corpus: inputs and the bytes after them (targets), on cuda:0.
fn batch(corpus: &[u8], offsets: &mut Offsets) -> locus::Result<Batch<Cuda<0>>> {
    let (mut x, mut y) = (Vec::with_capacity(BATCH * CONTEXT), Vec::with_capacity(BATCH * CONTEXT));
    for _ in 0..BATCH {
        let at = offsets.next(corpus.len() - CONTEXT - 1);
        x.extend(corpus[at..at + CONTEXT].iter().map(|&c| c as f32));
        y.extend(corpus[at + 1..at + CONTEXT + 1].iter().map(|&c| c as i32));
    }
    let x = Tensor::<Cpu>::from_vec(x, [BATCH, CONTEXT])?.to::<Cuda<0>>()?;
    let y = Tensor::<Cpu, i32>::from_vec(y, [BATCH * CONTEXT])?.to::<Cuda<0>>()?;
    Ok((x, y))
}

/// One training step: the loss before it, on cuda:0 (not read back).
fn step(
    dp: &mut DataParallel<Gpt<Cuda<0>>, Cuda<0>>,
    opt: &mut AdamW<Cuda<0>>,
    lr: f64,
    (x, y): &Batch<Cuda<0>>,
) -> locus::Result<Tensor<Cuda<0>>> {
    nn::zero_grad(dp.module());
    let logits = dp.forward(x)?;
    let loss = logits.reshape([BATCH * CONTEXT, VOCAB])?.cross_entropy(y)?;
    loss.backward()?;
    clip_grad_norm(dp.module(), 1.0)?;
    opt.set_lr(lr);
    opt.step(dp.module_mut())?;
    Ok(loss.detach())
}

/// `n` bytes sampled after `prompt`, from the model's softmax at temperature 0.8.
fn sample(model: &Gpt<Cuda<0>>, prompt: &[u8], n: usize, seed: u64) -> locus::Result<String> {
    let _off = locus::no_grad();
    let mut text = prompt.to_vec();
    let mut rng = Offsets(seed);
    for _ in 0..n {
        let window = &text[text.len().saturating_sub(CONTEXT)..];
        let x = Tensor::<Cuda<0>>::from_vec(window.iter().map(|&c| c as f32).collect(), [1, window.len()])?;
        let logits = model.forward(&x)?.select(1, window.len() - 1)?; // [1, VOCAB]
        let p = (logits * (1.0 / 0.8))?.softmax(1)?.to_vec()?;
        let u = rng.next(1 << 24) as f32 / (1 << 24) as f32;
        let mut acc = 0.0;
        let next = p.iter().position(|&q| {
            acc += q;
            acc > u
        });
        text.push(next.unwrap_or(b' ' as usize) as u8);
    }
    Ok(String::from_utf8_lossy(&text).into_owned())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tiny_gpt: {e}");
            ExitCode::FAILURE
        }
    }
}

fn steps() -> Result<usize, Box<dyn std::error::Error>> {
    let steps: usize = match std::env::var("TINY_GPT_STEPS") {
        Ok(v) => v.parse().map_err(|_| format!("TINY_GPT_STEPS={v:?} is not a number of steps"))?,
        Err(_) => 300,
    };
    if steps < 2 {
        return Err("TINY_GPT_STEPS must be at least 2 (the resume check runs halfway)".into());
    }
    Ok(steps)
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::var_os("RANK").is_some() {
        return run_ddp();
    }
    let steps = steps()?;
    let corpus: Vec<u8> = CORPUS.concat();
    let ids = devices()?;
    println!(
        "backend: {}; a {LAYERS}-layer, {WIDTH}-wide, {HEADS}-head byte transformer on {} bytes of locus's docs, \
         data parallel over {} device(s)",
        locus::backend_name()?,
        corpus.len(),
        ids.len()
    );
    let model = Gpt::new_on(Cuda::<0>, 1)?;
    let params: usize = nn::named_parameters(&model).iter().map(|(_, p)| p.numel()).sum();
    println!("{params} parameters");
    let mut dp = DataParallel::new(model, &ids, Cuda::<0>)?;
    let mut opt = AdamW::new(3e-3).weight_decay(0.01);
    let schedule = CosineWithWarmup { peak: 3e-3, floor: 3e-4, warmup: steps as u64 / 10, total: steps as u64 };
    let mut offsets = Offsets(7);
    let batches: Vec<_> = (0..steps).map(|_| batch(&corpus, &mut offsets)).collect::<locus::Result<_>>()?;

    let bar = ProgressBar::new(steps as u64);
    if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} steps  {msg}") {
        bar.set_style(style);
    }
    let dir = std::env::temp_dir();
    let (weights, moments) = (
        dir.join(format!("tiny_gpt-{}-weights.safetensors", std::process::id())),
        dir.join(format!("tiny_gpt-{}-adamw.safetensors", std::process::id())),
    );
    let halfway = steps / 2;
    let (mut first, mut last, mut resumed_loss) = (None, 0.0, None);
    let mut tail = Vec::with_capacity(TAIL);
    let start = Instant::now();
    for (k, b) in batches.iter().enumerate() {
        if k == halfway {
            // Save, and check that a fresh model and optimizer loaded from the files take
            // the same next step as the running ones.
            nn::save_state_dict(dp.module(), &weights)?;
            opt.save_state(&moments)?;
            let mut fresh = Gpt::new_on(Cuda::<0>, 99)?;
            nn::load_state_dict(&mut fresh, &locus::load_safetensors::<Cuda<0>>(&weights)?)?;
            let mut fresh_opt = AdamW::new(3e-3).weight_decay(0.01);
            fresh_opt.load_state(&locus::load_safetensors::<Cuda<0>>(&moments)?)?;
            let mut fresh_dp = DataParallel::new(fresh, &ids, Cuda::<0>)?;
            resumed_loss = Some(step(&mut fresh_dp, &mut fresh_opt, schedule.lr(k as u64), b)?.item()?);
        }
        let loss = step(&mut dp, &mut opt, schedule.lr(k as u64), b)?;
        if k == halfway {
            let (resumed, running) = (resumed_loss.unwrap_or(f32::NAN), loss.item()?);
            bar.suspend(|| {
                println!("step {k}: resumed from the checkpoint: loss {resumed:.6}, uninterrupted {running:.6}")
            });
            if resumed != running {
                return Err(format!("the resumed run's loss {resumed} is not the uninterrupted run's {running}").into());
            }
        }
        if k + TAIL >= steps {
            tail.push(loss.clone());
        }
        if k % 25 == 0 || k + 1 == steps {
            last = loss.item()?;
            first.get_or_insert(last);
            bar.set_message(format!("loss {last:.3}"));
        }
        bar.inc(1);
    }
    bar.finish();
    std::fs::remove_file(&weights).ok();
    std::fs::remove_file(&moments).ok();
    let secs = start.elapsed().as_secs_f64();
    let goal = target()?;
    println!(
        "{steps} steps in {secs:.1} s ({:.0} tokens/s); loss {:.3} → {last:.3} (target below {goal})",
        (steps * BATCH * CONTEXT) as f64 / secs,
        first.unwrap_or(f32::NAN)
    );
    let final_loss = Tensor::stack(&tail.iter().collect::<Vec<_>>(), 0)?.mean()?.item()?;
    println!("final loss (mean of the last {} steps): {final_loss:?}", TAIL.min(steps));
    let model = dp.into_inner();
    println!("sample: {:?}", sample(&model, b"locus ", 80, 3)?);
    if last.is_nan() || last >= goal {
        return Err(format!("the loss ended at {last}, not below {goal}").into());
    }
    Ok(())
}

/// Under torchrun (or any launcher `dist::init` reads): one process per device, each on
/// its rank's rows of every batch, the gradients averaged by `DistributedDataParallel`.
/// Rank 0 checks at the end that every rank holds the same weights, bit for bit.
fn run_ddp() -> Result<(), Box<dyn std::error::Error>> {
    use locus::dist::{self, DistributedDataParallel, ReduceOp};
    use locus::Local;
    let steps = steps()?;
    let d = dist::init()?;
    let (rank, world) = (d.rank(), d.world_size());
    // `Local`: this rank's GPU, bound by `dist::init`; the training code below is typed
    // (`Tensor<Local>`), whichever device the launcher gave the rank.
    let local: Local = d.local()?;
    let rows = BATCH / world;
    if rows == 0 {
        return Err(format!("{world} ranks for batches of {BATCH}: at most {BATCH} ranks").into());
    }
    let corpus: Vec<u8> = CORPUS.concat();
    // Every rank starts from its own seed; the wrapper makes them all rank 0's.
    let model = Gpt::<Local>::new_on(local, 1 + rank as u64)?;
    let mut ddp = DistributedDataParallel::new(model, d.group())?;
    let mut opt = AdamW::<Local>::new(3e-3).weight_decay(0.01);
    let schedule = CosineWithWarmup { peak: 3e-3, floor: 3e-4, warmup: steps as u64 / 10, total: steps as u64 };
    let mut offsets = Offsets(7);
    // The last steps' losses, averaged over them and every rank at the end.
    let (mut first, mut tail) = (None, Vec::with_capacity(TAIL));
    let start = Instant::now();
    for k in 0..steps {
        // Every rank draws the same batch and takes its rows of it.
        let (x, y) = batch(&corpus, &mut offsets)?;
        let x = x.narrow(0, rank * rows, rows)?.to::<Local>()?;
        let y = y.narrow(0, rank * rows * CONTEXT, rows * CONTEXT)?.to::<Local>()?;
        nn::zero_grad(ddp.module());
        let loss = ddp.module().forward(&x)?.reshape([rows * CONTEXT, VOCAB])?.cross_entropy(&y)?;
        ddp.backward(&loss)?;
        clip_grad_norm(ddp.module(), 1.0)?;
        opt.set_lr(schedule.lr(k as u64));
        opt.step(ddp.module_mut())?;
        if k == 0 {
            first = Some(loss.item()?);
        }
        if k + TAIL >= steps {
            tail.push(loss.detach());
        }
    }
    // One rank's loss is over its few rows; judge the mean over every rank and the last
    // steps, the same number on every rank.
    let mine = Tensor::stack(&tail.iter().collect::<Vec<_>>(), 0)?.mean()?;
    let last = d.group().all_reduce(&mine, ReduceOp::Avg)?.item()?;
    // The same weights everywhere: each parameter gathered from every rank.
    for (name, p) in nn::named_parameters(ddp.module()) {
        let mine = p.to_vec()?;
        for (r, theirs) in d.group().all_gather(&p.detach())?.iter().enumerate() {
            if theirs.to_vec()? != mine {
                return Err(format!("rank {rank}: `{name}` differs from rank {r}'s").into());
            }
        }
    }
    println!("final loss (mean of the last {} steps): {last:?}", TAIL.min(steps));
    println!(
        "rank {rank} of {world} on {}: {steps} steps in {:.1} s, loss {:.3} → {last:.3} (last {} steps, every rank); weights equal on every rank",
        local.id(),
        start.elapsed().as_secs_f64(),
        first.unwrap_or(f32::NAN),
        TAIL.min(steps)
    );
    let goal = target()?;
    if last.is_nan() || last >= goal {
        return Err(format!("rank {rank}: the loss ended at {last}, not below {goal}").into());
    }
    Ok(())
}
