//! DistributedDataParallel overlap (issue 34): the backward pass with its gradient
//! exchange overlapped (`ddp.backward`: each bucket's all-reduce starts once the pass has
//! its gradients) against the same two run one after the other (`backward_no_sync`, then
//! `average_gradients`), with each part alone for reference.
//!
//! Every rank runs the same 8-layer MLP (`Linear(1024)` + ReLU, 32 MiB of f32
//! gradients) on its own 128 rows, with 4 MiB buckets (8 buckets). A sample is one
//! backward pass and its exchange, from a barrier to the device synchronized after the
//! gradients are written back, in wall time; the forward pass before it is not timed.
//! Both sides do the same work with the same sync points: one backward, one all-reduce of
//! every gradient, the same buckets. Rank 0 prints the rows (median, min, max of 11
//! samples after 3 warm-up ones), in the format of `benches/gpu`.
//!
//!     cargo bench --bench ddp_overlap                  (2 processes, a TCP group)
//!     torchrun --nproc-per-node=N --no-python target/release/deps/ddp_overlap-*
//!                                                      (one process per GPU: NCCL)
//!
//! Without launcher variables it starts 2 copies of itself on this machine's first
//! device (both on cuda:0 on a one-GPU machine) joined by a TCP group over a file
//! store: that measures the TCP path. Under torchrun it uses `dist::init()`, the group
//! bound to each rank's device (NCCL on the cuda backend).

use std::process::{Command, ExitCode};
use std::sync::Arc;
use std::time::{Duration, Instant};

use locus::dist::{self, DistributedDataParallel, FileStore, ProcessGroup, Store};
use locus::nn::{self, Linear, Module, Relu, Sequential};
use locus::{synchronize, Device, DeviceId, Dyn, Tensor};

const WIDTH: usize = 1024;
const LAYERS: u64 = 8;
const ROWS: usize = 128;
const BUCKET: usize = 4 << 20;
const WORLD: usize = 2;
const WARM: usize = 3;
const REPS: usize = 11;
/// Set in the copies this bench starts: their rank, and the store's folder.
const CHILD: &str = "LOCUS_DDP_BENCH_RANK";
const DIR: &str = "LOCUS_DDP_BENCH_DIR";

fn main() -> ExitCode {
    let run = if std::env::var_os("RANK").is_some() {
        launched()
    } else if let Some(rank) = std::env::var_os(CHILD) {
        child(rank.to_string_lossy().parse().unwrap_or(usize::MAX))
    } else {
        parent()
    };
    match run {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ddp_overlap: {e}");
            ExitCode::FAILURE
        }
    }
}

type Res = Result<(), Box<dyn std::error::Error>>;

/// Starts `WORLD` copies of this program and waits for them.
fn parent() -> Res {
    let dir = std::env::temp_dir().join(format!("locus-ddp-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let exe = std::env::current_exe()?;
    let children = (0..WORLD)
        .map(|r| {
            Command::new(&exe)
                .env(CHILD, r.to_string())
                .env(DIR, &dir)
                // Both simulated devices exist on the host backend; a GPU run shares cuda:0.
                .env_remove("LOCUS_HOST_DEVICES")
                .spawn()
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut failed = 0;
    for mut c in children {
        failed += usize::from(!c.wait()?.success());
    }
    std::fs::remove_dir_all(&dir).ok();
    if failed > 0 {
        return Err(format!("{failed} of {WORLD} ranks failed").into());
    }
    Ok(())
}

/// A copy started by `parent`: a TCP group over a file store, on cuda:0.
fn child(rank: usize) -> Res {
    let dir = std::env::var_os(DIR).ok_or("no store folder")?;
    let store: Arc<dyn Store> = Arc::new(FileStore::new(dir, Duration::from_secs(120))?);
    let group = ProcessGroup::new(store, rank, WORLD, Duration::from_secs(120))?;
    bench(&group, Dyn::new(DeviceId::Cuda(0)), "tcp")
}

/// Under a launcher: the group of `dist::init`, on this rank's device.
fn launched() -> Res {
    let d = dist::init()?;
    let device = d.device()?;
    let kind = if locus::backend_name()? == "cuda" { "nccl" } else { "tcp" };
    bench(d.group(), device, kind)
}

fn bench(group: &ProcessGroup, device: Dyn, kind: &str) -> Res {
    let mut model = Sequential::<Dyn>::new();
    for i in 0..LAYERS {
        model = model.append(Linear::new_on(device, WIDTH, WIDTH, i)?).append(Relu::new());
    }
    let x = Tensor::<Dyn>::rand_on(device, [ROWS, WIDTH], 1 + group.rank() as u64)?;
    let t = Tensor::<Dyn>::rand_on(device, [ROWS, WIDTH], 100 + group.rank() as u64)?;
    let mut ddp = DistributedDataParallel::new(model, group)?.bucket_bytes(BUCKET);
    let sync = || synchronize(device.id());
    type Ddp<'g> = DistributedDataParallel<'g, Sequential<Dyn>>;
    type Step = fn(&mut Ddp<'_>, &Tensor<Dyn>) -> locus::Result<()>;
    let rows: [(&str, Step, &str); 4] = [
        ("backward_only", |d, l| d.backward_no_sync(l), "loss.backward() alone"),
        ("allreduce_only", |d, _| d.average_gradients(), "average_gradients() alone, of the gradients there"),
        (
            "serial",
            |d, l| {
                d.backward_no_sync(l)?;
                d.average_gradients()
            },
            "backward, then every bucket's all-reduce",
        ),
        ("overlapped", |d, l| d.backward(l), "ddp.backward(): each bucket's all-reduce starts once backward has it"),
    ];
    let world = group.world_size();
    for (name, step, what) in rows {
        let mut times = Vec::with_capacity(REPS);
        for k in 0..WARM + REPS {
            // The forward pass, untimed (`allreduce_only` keeps the gradients there).
            if name != "allreduce_only" || k == 0 {
                nn::zero_grad(ddp.module());
            }
            let loss = (ddp.module().forward(&x)? - &t)?.square()?.mean()?;
            if name == "allreduce_only" && k == 0 {
                ddp.backward_no_sync(&loss)?;
            }
            sync()?;
            group.barrier()?;
            let start = Instant::now();
            step(&mut ddp, &loss)?;
            sync()?;
            if k >= WARM {
                times.push(start.elapsed().as_secs_f64() * 1e3);
            }
        }
        times.sort_by(f64::total_cmp);
        if group.rank() == 0 {
            println!(
                "ddp_{kind}_{name}\t{:.3}\tms\t{what}; {world} ranks on {}, {LAYERS} x Linear({WIDTH}) + ReLU, {ROWS} rows a rank, {} MiB buckets, wall from a barrier to synchronize\t{:.3}\t{:.3}",
                times[REPS / 2],
                device.id(),
                BUCKET >> 20,
                times[0],
                times[REPS - 1]
            );
        }
    }
    if let Some(s) = ddp.last_backward() {
        if group.rank() == 0 {
            println!("# overlapped: {} of {} buckets started during backward", s.started_during_backward, s.buckets);
        }
    }
    group.barrier()?;
    Ok(())
}
