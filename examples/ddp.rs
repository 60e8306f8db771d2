//! Distributed data parallel (PyTorch DDP) by hand: linear regression on synthetic data,
//! one process per rank, each rank computing the gradients of its share of every batch,
//! averaged across the ranks with `dist::all_reduce_avg_bucketed`, then the same SGD step
//! on every rank.
//!
//! The gradient of a rank is scaled so that the average over the ranks is exactly the
//! gradient of the whole batch: the result equals a one-process run on the whole data
//! (`DDP_CHECK=1` makes rank 0 run that too and fail on a difference above 1e-5).
//!
//! Launched by torchrun, srun or mpirun (see the README's "Several processes"), or alone:
//!     cargo run --release --example ddp
//!     torchrun --nproc-per-node=3 --no-python ./target/release/examples/ddp

use std::net::TcpListener;
use std::process::ExitCode;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};
use locus::dist::{all_reduce_avg_bucketed, Dist, Launch, ProcessGroup, ReduceOp};
use locus::{bind, device_count, Device, DeviceId, Local, StaticDevice, Tensor};

/// Rows of synthetic data, all ranks together.
const ROWS: usize = 384;
const FEATURES: usize = 16;
/// Rows per optimizer step, all ranks together.
const BATCH: usize = 64;
const EPOCHS: usize = 30;
const LR: f32 = 0.1;
const SEED: u64 = 7;
/// The largest difference allowed between the weights of the run and of one process.
const TOLERANCE: f32 = 1e-5;
/// A small bucket, so that the gradients (w: 64 bytes, b: 4) take two buckets here; real
/// models use `dist::DEFAULT_BUCKET_BYTES`.
const BUCKET_BYTES: usize = 64;

/// `x @ w + b`, `w` of shape `[FEATURES, 1]`, `b` of shape `[1]`.
struct Linear {
    w: Tensor<Local>,
    b: Tensor<Local>,
}

/// The whole synthetic data set: every rank makes it from the same seed and keeps its
/// share. `y = x @ w_true + b_true + noise`.
struct Data {
    x: Vec<f32>,
    y: Vec<f32>,
}

impl Data {
    fn new() -> locus::Result<Data> {
        let x = Tensor::<locus::Cpu>::rand([ROWS, FEATURES], SEED)?.to_vec()?;
        let noise = Tensor::<locus::Cpu>::rand([ROWS], SEED + 1)?.to_vec()?;
        let w_true: Vec<f32> = (0..FEATURES).map(|j| (j as f32 * 0.37).sin() * 2.0).collect();
        let y = (0..ROWS)
            .map(|i| {
                let dot: f32 = x[i * FEATURES..(i + 1) * FEATURES].iter().zip(&w_true).map(|(a, b)| a * b).sum();
                dot + 0.5 + (noise[i] - 0.5) * 0.1
            })
            .collect();
        Ok(Data { x, y })
    }

    /// Rows `rows` of `x` and `y` on this rank's GPU.
    fn rows(&self, rows: &[usize]) -> locus::Result<(Tensor<Local>, Tensor<Local>)> {
        let x: Vec<f32> = rows.iter().flat_map(|&i| self.x[i * FEATURES..(i + 1) * FEATURES].iter().copied()).collect();
        let y: Vec<f32> = rows.iter().map(|&i| self.y[i]).collect();
        Ok((Tensor::from_vec(x, [rows.len(), FEATURES])?, Tensor::from_vec(y, [rows.len(), 1])?))
    }
}

/// Trains on the share of `rank` of `world` and returns the final weights (`w` then `b`).
/// With a `group`, the gradients are averaged across it; without, the process is alone
/// (`rank` 0 of 1). `bar` shows the epochs and their loss.
fn train(
    data: &Data,
    rank: usize,
    world: usize,
    group: Option<&ProcessGroup>,
    bar: Option<&ProgressBar>,
) -> locus::Result<Vec<f32>> {
    let mut model = Linear { w: Tensor::zeros([FEATURES, 1])?, b: Tensor::zeros([1])? };
    // Each rank's gradient is its rows' share of the whole batch's mean, times `world`:
    // the average over the ranks (what `all_reduce_avg_bucketed` computes) is then the
    // gradient of the mean squared error of the whole batch.
    let scale = 2.0 * world as f32 / BATCH as f32;
    for epoch in 0..EPOCHS {
        let mut loss_sum = 0.0f32;
        for step in 0..ROWS / BATCH {
            // The batch's rows `rank`, `rank + world`, ...
            let rows: Vec<usize> = (step * BATCH..(step + 1) * BATCH).skip(rank).step_by(world).collect();
            let (x, y) = data.rows(&rows)?;
            let residual = ((x.matmul(&model.w)? + &model.b)? - &y)?;
            let mut grad_w = (x.t()?.matmul(&residual)? * scale)?;
            let mut grad_b = (residual.sum_dim(0, false)? * scale)?;
            let mut local_loss = residual.square()?.sum()?.reshape([1])?;
            if let Some(g) = group {
                all_reduce_avg_bucketed(g, &mut [&mut grad_w, &mut grad_b], BUCKET_BYTES)?;
                local_loss = g.all_reduce(&local_loss, ReduceOp::Sum)?;
            }
            loss_sum += local_loss.item()? / BATCH as f32;
            model.w = (&model.w - (grad_w * LR)?)?;
            model.b = (&model.b - (grad_b * LR)?)?;
        }
        if let Some(bar) = bar {
            let loss = loss_sum / (ROWS / BATCH) as f32;
            bar.suspend(|| println!("epoch {:>2}: loss {loss:.6}", epoch + 1));
            bar.set_message(format!("loss {loss:.6}"));
            bar.inc(1);
        }
    }
    if let Some(bar) = bar {
        bar.finish();
    }
    let mut weights = model.w.to_vec()?;
    weights.extend(model.b.to_vec()?);
    Ok(weights)
}

/// Whether a launcher (torchrun, Slurm, Open MPI, MPICH) set this process's rank.
fn launched() -> bool {
    ["RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"].iter().any(|v| std::env::var_os(v).is_some())
}

/// The process's place: from the launcher, or a world of one on a free local port.
fn join() -> Result<Dist, Box<dyn std::error::Error>> {
    if launched() {
        return Ok(locus::dist::init()?);
    }
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let launch = Launch::builder().rank(0, 1).local_rank(0, 1).master("127.0.0.1", port).build()?;
    Ok(locus::dist::init_with(launch, Duration::from_secs(60))?)
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ddp: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let dist = join()?;
    let (rank, world) = (dist.rank(), dist.world_size());
    if world > BATCH {
        return Err(format!("{world} processes, more than the {BATCH} rows of a batch").into());
    }
    // `Local`, the role of the rank's own device (its local rank, or LOCUS_DEVICE_MAP's),
    // which `dist::init` bound and where the group's collectives run on NCCL on the cuda
    // backend; all the code above is typed `Tensor<Local>`. With more ranks than devices
    // the rank has none of its own: it binds `Local` to a shared one, and every collective
    // moves over TCP.
    let local: Local = match dist.local() {
        Ok(local) => local,
        Err(_) => {
            bind::<Local>(DeviceId::Cuda((dist.local_rank() % device_count()?) as u32))?;
            Local::resolve()?
        }
    };
    if rank == 0 {
        let path = if dist.group().uses_communicator() { "NCCL" } else { "TCP" };
        println!(
            "backend: {}; {world} process(es); rank 0 on {}; gradients over {path}; {ROWS} rows, batches of {BATCH}",
            locus::backend_name()?,
            local.id()
        );
    }
    let data = Data::new()?;
    let bar = (rank == 0).then(|| {
        let bar = ProgressBar::new(EPOCHS as u64);
        if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} epochs  {msg}") {
            bar.set_style(style);
        }
        bar
    });
    let weights = train(&data, rank, world, Some(dist.group()), bar.as_ref())?;
    dist.group().barrier()?;
    if rank != 0 {
        return Ok(());
    }
    let show: Vec<String> = weights.iter().map(|v| format!("{v:.5}")).collect();
    println!("w = [{}]", show[..FEATURES].join(", "));
    println!("b = {}", show[FEATURES]);

    if std::env::var("DDP_CHECK").is_ok_and(|v| v == "1") {
        let alone = train(&data, 0, 1, None, None)?;
        let diff = weights.iter().zip(&alone).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
        println!("max abs difference from one process on the whole data: {diff:e} (tolerance {TOLERANCE:e})");
        if diff > TOLERANCE || diff.is_nan() {
            return Err(format!("the {world}-process weights differ from one process's by {diff:e}").into());
        }
    }
    Ok(())
}
