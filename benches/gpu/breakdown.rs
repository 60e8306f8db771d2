//! Where an eager op's host time goes (issue 35, item 1): host time per op in short
//! batches, so that the driver's launch queue never fills and each row times the host's
//! own work, not the device's pace (the `*_submit` rows queue 20000 launches and end up
//! timing how fast the GPU drains them). Each sample is `BATCHES` batches of `BATCH` ops,
//! each batch after a synchronize; only the submits are timed; per op. The rows go from
//! the bare driver call up to the whole op, so that each difference is one part:
//!
//! - `breakdown_raw_empty`: `cuLaunchKernel` of an empty kernel, no arguments;
//! - `breakdown_raw_args3`: `cuLaunchKernel` of a 1024-element copy kernel, 3 arguments;
//! - `breakdown_raw_record`: the same launch and a `cuEventRecord` after it (what a
//!   stream's ordering record costs, where an op needs one);
//! - `breakdown_user_kernel_1k`: a `#[locus::kernel]` add into an existing tensor (kernel
//!   lookup, argument checks and packing, ordering, no allocation);
//! - `breakdown_add_1k`: the built-in add, allocating its output (the user kernel row
//!   plus the allocation and the dispatch of a built-in op);
//! - `breakdown_relu_1k`: a built-in unary op, allocating;
//! - `breakdown_zeros_1k`: an allocation and a memset, no kernel.
//!
//! `gpu breakdown-loop OP SECONDS` repeats one row's batches for that long, for a
//! sampling profiler (`perf record -g`).

use std::time::{Duration, Instant};

use locus::{Cuda, Graph, Stream, Tensor};

use crate::method::{row, samples};
use crate::raw::Raw;
use crate::{add_1k, sync, G};

/// Ops per batch: far below the driver's launch queue (about a thousand launches).
pub(crate) const BATCH: usize = 128;
/// Batches per sample.
const BATCHES: usize = 40;

/// Host microseconds per op of `op`, over one sample of `BATCHES` batches of `BATCH`.
fn per_op(op: impl FnMut(), settle: impl FnMut()) -> f64 {
    host_per_call((BATCHES, BATCH), op, settle)
}

/// Host microseconds per call of `op` over `batches` batches of `batch` calls, each
/// batch after `settle` (only the calls are timed): the method of every breakdown row.
pub(crate) fn host_per_call((batches, batch): (usize, usize), mut op: impl FnMut(), mut settle: impl FnMut()) -> f64 {
    let mut timed = Duration::ZERO;
    for _ in 0..batches {
        settle();
        let t = Instant::now();
        for _ in 0..batch {
            op();
        }
        timed += t.elapsed();
    }
    settle();
    timed.as_secs_f64() / (batches * batch) as f64 * 1e6
}

/// The named op of the breakdown (`None` for an unknown name), each a closure that queues
/// one op on device 0.
fn op<'a>(name: &str, raw: &'a Raw, t: &'a Operands) -> Option<Box<dyn FnMut() + 'a>> {
    Some(match name {
        "raw_empty" => Box::new(|| raw.launch_empty()),
        "raw_args3" => Box::new(|| raw.launch_small_copy()),
        "raw_record" => Box::new(|| {
            raw.launch_small_copy();
            raw.record();
        }),
        "user_kernel_1k" => {
            let mut out = Tensor::<G>::zeros([1024]).unwrap();
            Box::new(move || add_1k(&t.a, &t.b, &mut out, 1024).launch().unwrap())
        }
        "add_1k" => Box::new(|| drop((&t.a + &t.b).unwrap())),
        "relu_1k" => Box::new(|| drop(t.a.relu().unwrap())),
        "zeros_1k" => Box::new(|| drop(Tensor::<G>::zeros([1024]).unwrap())),
        _ => return None,
    })
}

/// The rows in order, each with its note.
const ROWS: [(&str, &str); 7] = [
    ("raw_empty", "raw cuLaunchKernel, empty kernel, no arguments"),
    ("raw_args3", "raw cuLaunchKernel, 1024-element copy kernel, 3 arguments"),
    ("raw_record", "raw_args3 + cuEventRecord on the same stream"),
    ("user_kernel_1k", "#[locus::kernel] add into an existing 1024-element tensor"),
    ("add_1k", "built-in 1024-element add, allocating its output"),
    ("relu_1k", "built-in 1024-element relu, allocating its output"),
    ("zeros_1k", "Tensor::zeros of 1024 elements: allocation + memset"),
];

pub(crate) struct Operands {
    a: Tensor<G>,
    b: Tensor<G>,
}

impl Operands {
    fn new() -> Operands {
        Operands { a: Tensor::<Cuda<0>>::rand([1024], 1).unwrap(), b: Tensor::<Cuda<0>>::rand([1024], 2).unwrap() }
    }
}

/// Every row (`gpu breakdown`).
pub(crate) fn rows(raw: &Raw) {
    let t = Operands::new();
    for (name, note) in ROWS {
        let mut f = op(name, raw, &t).expect("every row has its op");
        let raw_side = name.starts_with("raw");
        let settle = || if raw_side { raw.sync_ctx() } else { sync() };
        let s = samples(|| per_op(&mut f, settle));
        row(
            &format!("breakdown_{name}"),
            &s,
            "us/op",
            &format!("{note}; host time per op in {BATCHES} batches of {BATCH}, each after a synchronize"),
        );
    }
}

/// `gpu breakdown-loop OP SECONDS`: `OP`'s batches for `SECONDS`, for a profiler.
pub(crate) fn profile_loop(raw: &Raw, name: &str, seconds: f64) -> Result<(), String> {
    if name == "replay20" {
        replay_loop(seconds);
        return Ok(());
    }
    let t = Operands::new();
    let names = ROWS.map(|r| r.0).join(", ") + ", replay20";
    let mut f = op(name, raw, &t).ok_or_else(|| format!("no op `{name}` (one of {names})"))?;
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let (mut batches, start) = (0u64, Instant::now());
    while Instant::now() < until {
        per_op(&mut f, || if name.starts_with("raw") { raw.sync_ctx() } else { sync() });
        batches += 1;
    }
    println!("{name}: {} ops in {:.4} s", batches * (BATCHES * BATCH) as u64, start.elapsed().as_secs_f64());
    Ok(())
}

/// `gpu breakdown-loop replay20 SECONDS`: `Graph::replay` of `graph.rs`'s 20-add chain
/// in batches of `BATCH`, each after a synchronize of its stream, for `SECONDS` (what
/// `graph_breakdown_launch` times, for a profiler or `benches/fakecuda/count.sh`).
fn replay_loop(seconds: f64) {
    let stream = Stream::<G>::new().unwrap();
    let (mut x, mut b) = (Tensor::<G>::rand([1024], 1).unwrap(), Tensor::<G>::rand([1024], 2).unwrap());
    let mut g = Graph::capture(&stream, (&mut x, &mut b), |(x, b)| crate::graph::chain(x, b)).unwrap();
    let mut replay = || replay_chain(&mut g);
    let until = Instant::now() + Duration::from_secs_f64(seconds);
    let (mut batches, start) = (0u64, Instant::now());
    while Instant::now() < until {
        per_op(&mut replay, || stream.synchronize().unwrap());
        batches += 1;
    }
    println!("replay20: {} ops in {:.4} s", batches * (BATCHES * BATCH) as u64, start.elapsed().as_secs_f64());
}

/// One replay of `replay_loop`'s graph: a function of its own, so that a profiler can
/// count it alone (`benches/fakecuda/count.sh replay20`).
#[inline(never)]
fn replay_chain(g: &mut Graph<G, (&mut Tensor<G>, &mut Tensor<G>), Tensor<G>>) {
    let _ = g.replay().unwrap();
}
