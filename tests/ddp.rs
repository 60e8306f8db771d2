//! Data-parallel training across real processes on this machine:
//!
//! - `dist::all_reduce_avg_bucketed` with 3 ranks (this binary run again once per rank,
//!   as in tests/dist.rs, meeting through a `FileStore`) equals one `all_reduce` per
//!   tensor, bit for bit, for bucket sizes from tiny to huge;
//! - the `ddp` example, run as 3 processes with torchrun's variables and `DDP_CHECK=1`,
//!   succeeds on every rank (rank 0 checks its weights against one process).

use std::fs::File;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

mod common;
use common::ranks::{fresh_dir, run_ranks, wait_all};

use locus::dist::{all_reduce_avg_bucketed, FileStore, ProcessGroup, ReduceOp, Store, DEFAULT_BUCKET_BYTES};
use locus::{Cpu, Cuda, Device, DeviceId, Dyn, Element, Tensor};

/// The group's timeout: long, as a loaded machine may be slow; it only matters when
/// something is wrong.
const LONG: Duration = Duration::from_secs(30);

/// Rank `rank`'s gradient `k` of `n` elements: different on every rank and tensor, with
/// fractions, so that a different order of summation shows in the bits.
fn grad<T: Element>(rank: usize, k: usize, n: usize) -> Vec<T> {
    (0..n).map(|i| T::from_f64(((rank * 31 + k * 7 + i * 17) % 23) as f64 * 0.37 - 3.3 + rank as f64 * 1e-3)).collect()
}

/// The gradients' shapes: scalars, vectors, matrices, an empty one, one of 128 KiB (f32).
const SHAPES: &[&[usize]] = &[&[3, 5], &[7], &[], &[2, 2, 3], &[0, 4], &[1], &[1 << 15], &[64, 3], &[5]];

/// Bucketed against per-tensor `all_reduce(Avg)` on `device`, for bucket sizes from 0
/// (every tensor alone) up to one bucket for everything.
fn check_bucketed<D: Device, T: Element>(pg: &ProcessGroup, device: D) -> Result<(), String> {
    let e = |e: locus::Error| e.to_string();
    let rank = pg.rank();
    let make = || -> Result<Vec<Tensor<D, T>>, String> {
        SHAPES
            .iter()
            .enumerate()
            .map(|(k, s)| Tensor::from_vec_on(device, grad::<T>(rank, k, s.iter().product()), s).map_err(e))
            .collect()
    };
    let want: Vec<Vec<T>> = make()?
        .iter()
        .map(|g| pg.all_reduce(g, ReduceOp::Avg).and_then(|t| t.to_vec()).map_err(e))
        .collect::<Result<_, _>>()?;
    for bytes in [0, 1, 4, 24, 60, 100, 4096, 1 << 17, (1 << 17) + 4, DEFAULT_BUCKET_BYTES, usize::MAX] {
        let mut grads = make()?;
        let mut refs: Vec<&mut Tensor<D, T>> = grads.iter_mut().collect();
        all_reduce_avg_bucketed(pg, &mut refs, bytes).map_err(|err| format!("bucket {bytes}: {err}"))?;
        for ((g, s), w) in grads.iter().zip(SHAPES).zip(&want) {
            let what = format!("{} {s:?} in buckets of {bytes} bytes on {}", T::DTYPE, device.id());
            if g.shape() != *s || g.device() != device.id() {
                return Err(format!("{what}: the result is {:?} on {}", g.shape(), g.device()));
            }
            let (got, want) = (format!("{:?}", g.to_vec().map_err(e)?), format!("{w:?}"));
            if got != want {
                return Err(format!(
                    "{what}: got {}, want {}",
                    &got[..got.len().min(300)],
                    &want[..want.len().min(300)]
                ));
            }
        }
    }
    Ok(())
}

fn bucketed_ranks(rank: usize, world: usize, dir: &Path) -> Result<(), String> {
    let store: Arc<dyn Store> = Arc::new(FileStore::new(dir, LONG).map_err(|e| e.to_string())?);
    let pg = ProcessGroup::new(store, rank, world, LONG).map_err(|e| e.to_string())?;
    check_bucketed::<_, f32>(&pg, Cpu)?;
    check_bucketed::<_, f32>(&pg, Cuda::<0>)?;
    check_bucketed::<_, f64>(&pg, Dyn::new(DeviceId::Cuda(0)))?;
    check_bucketed::<_, i32>(&pg, Cpu)?;
    // No gradients at all: nothing to do, and nothing sent.
    all_reduce_avg_bucketed::<Cpu, f32>(&pg, &mut [], 16).map_err(|e| e.to_string())?;
    pg.barrier().map_err(|e| e.to_string())
}

#[test]
fn bucketed_all_reduce_equals_one_all_reduce_per_tensor() {
    run_ranks("bucketed_all_reduce_equals_one_all_reduce_per_tensor", 3, bucketed_ranks);
}

/// `target/<profile>/examples/ddp`, next to `target/<profile>/deps/` where this test runs.
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile = exe.parent().and_then(Path::parent).expect("the test binary lies in target/<profile>/deps/");
    let bin = profile.join("examples").join(format!("ddp{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "the ddp example is not built at {}: `cargo test` builds it (not with a target filter \
         such as `--test ddp`); build it with `cargo build --example ddp` (same profile)",
        bin.display()
    );
    bin
}

#[test]
fn ddp_example_with_three_processes_equals_one_process() {
    let bin = example_binary();
    let world = 3;
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = fresh_dir("example");
    let log = |r: usize| dir.join(format!("rank{r}.log"));
    let children = (0..world)
        .map(|r| {
            let out = File::create(log(r)).unwrap();
            let mut cmd = Command::new(&bin);
            // Only torchrun's variables: none of another launcher's, which come first.
            for v in ["SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "TORCHELASTIC_RUN_ID"] {
                cmd.env_remove(v);
            }
            cmd.env("RANK", r.to_string())
                .env("WORLD_SIZE", world.to_string())
                .env("LOCAL_RANK", r.to_string())
                .env("LOCAL_WORLD_SIZE", world.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .env("DDP_CHECK", "1")
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .spawn()
                .unwrap()
        })
        .collect();
    wait_all("the ddp example", children, log, &dir);
    let out = std::fs::read_to_string(log(0)).unwrap();
    assert!(
        out.contains("3 process(es)") && out.contains("max abs difference from one process"),
        "rank 0 did not report a 3-process run checked against one process:\n{out}"
    );
    std::fs::remove_dir_all(&dir).ok();
}
