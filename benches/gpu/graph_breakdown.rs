//! Where a graph replay's time goes (issue 35, item 2): the 20-add chain of `graph.rs`
//! replayed from a locus `Graph` and, beside it, the same 20 launches (the C++ baseline's
//! `add_f32`, one thread per element) captured from a raw stream with cudarc. Each pair
//! of rows times one part the same way on both sides:
//!
//! - `graph_breakdown_{raw_,}launch`: host time of one `cuGraphLaunch` / `Graph::replay`,
//!   in batches of `BATCH` replays, each batch after a synchronize (so the queue never
//!   fills and only the host's own work is timed), per replay;
//! - `graph_breakdown_{raw_,}gpu`: device time of one replay, `GPU_REPLAYS` replays queued
//!   back to back between two events, per replay: what the graph itself costs the GPU;
//! - `graph_breakdown_{raw_,}sync`: `cuStreamSynchronize` / `Stream::synchronize` of an
//!   idle stream, per call;
//! - `graph_breakdown_{raw_,}replay_sync`: a replay and a synchronize of its stream, wall
//!   time per replay in a batch of 1000: the `graph_chain20_replay` row (times 20) and
//!   its raw twin, which the parts above add up to with the launch's latency.

use std::time::Instant;

use cudarc::driver::{result, sys};
use locus::{on_stream, Graph, Stream, Tensor};

use crate::breakdown::host_per_call;
use crate::method::{row, samples, stats};
use crate::raw::{BlockFrom, Raw};
use crate::{stream_time, G};

/// Replays per host-time batch: 160 kernels, far below the driver's launch queue.
const BATCH: usize = 8;
/// Batches per host-time sample.
const BATCHES: usize = 100;
/// Replays between the two events of a device-time sample.
const GPU_REPLAYS: usize = 100;
/// Replays per sample of the replay + synchronize rows (as `graph_chain20_replay`).
const SYNCED: usize = 1000;
/// Synchronizes of an idle stream per sample.
const SYNCS: usize = 2000;
/// Elements per add, as `graph.rs`.
const N: usize = 1024;

/// Wall microseconds per call of `op`, `count` calls in a row.
fn wall_per_call(count: usize, mut op: impl FnMut()) -> f64 {
    let t = Instant::now();
    for _ in 0..count {
        op();
    }
    t.elapsed().as_secs_f64() / count as f64 * 1e6
}

/// Prints the four rows of one side (`prefix` is `raw_` or empty).
fn rows(prefix: &str, side: &str, parts: [Vec<f64>; 4]) {
    let [launch, gpu, sync, replay_sync] = parts;
    let row_of = |part: &str, v: &[f64], note: String| row(&format!("graph_breakdown_{prefix}{part}"), v, "us", &note);
    row_of(
        "launch",
        &launch,
        format!("{side}: host time of one replay call, in {BATCHES} batches of {BATCH}, each after a synchronize"),
    );
    row_of(
        "gpu",
        &gpu,
        format!("{side}: device time per replay, {GPU_REPLAYS} replays back to back between two events"),
    );
    row_of("sync", &sync, format!("{side}: synchronize of the idle stream, per call in a batch of {SYNCS}"));
    row_of(
        "replay_sync",
        &replay_sync,
        format!("{side}: one replay + synchronize of its stream, wall time per replay in a batch of {SYNCED}"),
    );
}

/// The 20 adds captured from `raw`'s stream into a graph of their own, on allocations of
/// their own, instantiated; freed by [`RawChain::destroy`] once no replay runs.
struct RawChain {
    buffers: Vec<sys::CUdeviceptr>,
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

impl RawChain {
    /// Each buffer an allocation of `size` bytes of its own (at least the chain's `N`
    /// floats; larger spreads the buffers apart).
    fn capture(raw: &Raw, size: usize) -> RawChain {
        raw.bind();
        let s = raw.stream();
        let bytes = size.max(N * 4);
        // SAFETY: plain allocations on the bound context, freed by `destroy` after the
        // stream is synchronized; memset so that the adds read defined values.
        let buffers: Vec<_> = (0..22)
            .map(|_| unsafe {
                let p = result::malloc_sync(bytes).unwrap();
                result::memset_d8_sync(p, 0, N * 4).unwrap();
                p
            })
            .collect();
        let (x, b, y) = (buffers[0], buffers[1], &buffers[2..]);
        // SAFETY: the stream is raw's, alive for the process; the 20 launches read and
        // write the allocations above, alive until `destroy`, which runs after the last
        // replay completed and destroys the graph and its executable once.
        let (graph, exec) = unsafe {
            result::stream::begin_capture(s, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_GLOBAL).unwrap();
            raw.add_f32(x, b, y[0], N as i32);
            for i in 1..20 {
                raw.add_f32(y[i - 1], b, y[i], N as i32);
            }
            let graph = result::stream::end_capture(s).unwrap();
            (graph, result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)).unwrap())
        };
        RawChain { buffers, graph, exec }
    }

    /// Queues one replay on `raw`'s stream.
    fn launch(&self, raw: &Raw) {
        // SAFETY: `exec` lives until `destroy`, the stream for the process.
        unsafe { result::graph::launch(self.exec, raw.stream()).unwrap() };
    }

    /// Device µs per replay, `GPU_REPLAYS` replays back to back between two events, per
    /// sample.
    fn gpu_times(&self, raw: &Raw) -> Vec<f64> {
        raw.time(|| {
            for _ in 0..GPU_REPLAYS {
                self.launch(raw);
            }
        })
        .into_iter()
        .map(|t| t / GPU_REPLAYS as f64 * 1e6)
        .collect()
    }

    /// [`RawChain::gpu_times`] with the stream held by a 3 ms spin kernel until all the
    /// replays are queued (the device time cannot include the host falling behind), and
    /// the host µs per replay it took to queue them.
    fn gated_times(&self, raw: &Raw) -> (Vec<f64>, Vec<f64>) {
        let mut host = Vec::new();
        let device = raw.time_after(
            || raw.launch_spin(3_000_000),
            || {
                let t = Instant::now();
                for _ in 0..GPU_REPLAYS {
                    self.launch(raw);
                }
                host.push(t.elapsed().as_secs_f64() / GPU_REPLAYS as f64 * 1e6);
            },
        );
        let per = |t: Vec<f64>| t.into_iter().map(|t| t / GPU_REPLAYS as f64 * 1e6).collect();
        (per(device), host)
    }

    /// Frees the graph and its buffers.
    ///
    /// # Safety
    /// No replay of it is queued or running (the stream was synchronized after the last).
    unsafe fn destroy(self) {
        // SAFETY: the caller's contract: nothing uses the executable or the buffers.
        unsafe {
            result::graph::exec_destroy(self.exec).unwrap();
            result::graph::destroy(self.graph).unwrap();
            for p in self.buffers {
                result::free_sync(p).unwrap();
            }
        }
    }
}

/// The raw side: the chain captured from `raw`'s stream, launched with `cuGraphLaunch`.
fn raw_side(raw: &Raw) {
    let chain = RawChain::capture(raw, N * 4);
    let s = raw.stream();
    let launch = || chain.launch(raw);
    // SAFETY: `s` lives for the process.
    let sync = || unsafe { result::stream::synchronize(s).unwrap() };
    let host = samples(|| host_per_call((BATCHES, BATCH), launch, sync));
    let gpu = chain.gpu_times(raw);
    let idle = samples(|| wall_per_call(SYNCS, sync));
    let replay_sync = samples(|| {
        sync();
        wall_per_call(SYNCED, || {
            launch();
            sync();
        })
    });
    rows("raw_", "raw cudarc graph of the 20 add_f32 launches", [host, gpu, idle, replay_sync]);
    // SAFETY: the stream is idle (the last sample synchronized it): no replay runs.
    unsafe { chain.destroy() };
}

/// The locus side: `Graph::capture` of `graph.rs`'s chain, `Graph::replay`.
fn locus_side() {
    let stream = Stream::<G>::new().unwrap();
    let mut x = Tensor::<G>::rand([N], 1).unwrap();
    let mut b = Tensor::<G>::rand([N], 2).unwrap();
    let mut g = Graph::capture(&stream, (&mut x, &mut b), |(x, b)| crate::graph::chain(x, b)).unwrap();
    let host = samples(|| {
        host_per_call(
            (BATCHES, BATCH),
            || {
                let _ = g.replay().unwrap();
            },
            || stream.synchronize().unwrap(),
        )
    });
    let gpu: Vec<f64> = stream_time(&stream, || {
        for _ in 0..GPU_REPLAYS {
            let _ = g.replay().unwrap();
        }
    })
    .into_iter()
    .map(|t| t / GPU_REPLAYS as f64 * 1e6)
    .collect();
    let idle = samples(|| wall_per_call(SYNCS, || stream.synchronize().unwrap()));
    let replay_sync = samples(|| {
        stream.synchronize().unwrap();
        wall_per_call(SYNCED, || {
            let _ = g.replay().unwrap();
            stream.synchronize().unwrap();
        })
    });
    rows("", "locus Graph::replay of the 20-add chain", [host, gpu, idle, replay_sync]);
}

/// The raw chain's device time per replay in µs (median, min, max of the samples), for a
/// graph captured afresh, on new allocations, from `raw`'s stream.
fn raw_chain_gpu(raw: &Raw, size: usize) -> (f64, f64, f64, String) {
    let chain = RawChain::capture(raw, size);
    // Where its buffers lie: a chain of tiny kernels waits on every load, and how far the
    // data is from the SM that runs the block (its L2 slice) may be what changes.
    let (lo_addr, hi_addr) = chain.buffers.iter().fold((u64::MAX, 0), |(l, h), &p| (l.min(p), h.max(p)));
    let at = format!("buffers at {lo_addr:#x}..{:#x}", hi_addr + (N * 4) as u64);
    let (m, lo, hi) = stats(&chain.gpu_times(raw));
    // The same timed behind a gate, and how long the host took to queue the replays; the
    // process's threads by name (a locus thread started by then would show here).
    let (gated, host) = chain.gated_times(raw);
    // SAFETY: `raw.time` synchronized its last event, after every replay: nothing runs.
    unsafe { chain.destroy() };
    let ((g, g_lo, g_hi), (queued, _, _)) = (stats(&gated), stats(&host));
    let at = format!(
        "{at}; behind a 3 ms gate {g:.3} us [{g_lo:.3}-{g_hi:.3}], queued at {queued:.3} us per replay; threads: {}",
        thread_summary()
    );
    (m, lo, hi, at)
}

/// The process's threads, counted by name ("locus-pool" x 15, ...).
fn thread_summary() -> String {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return "unknown".into() };
    let mut names: Vec<String> = tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().trim_end_matches(|c: char| c.is_ascii_digit()).to_string())
        .collect();
    names.sort();
    let mut out: Vec<String> = Vec::new();
    for n in names.chunk_by(|a, b| a == b) {
        out.push(format!("{} x{}", n[0], n.len()));
    }
    out.join(", ")
}

/// `gpu graph-probe`: the raw chain's device time per replay after each thing a bench
/// process does before it, in order (issue 35: 21.2 µs in a process where locus did
/// nothing, 24.8 µs after locus's rows), to name the state that slows it.
/// Prints the raw chain's device time per replay now, after `what`.
fn probe_stage(raw: &Raw, what: &str) {
    probe_stage_sized(raw, what, N * 4);
}

/// [`probe_stage`] with each of the chain's buffers an allocation of `size` bytes.
fn probe_stage_sized(raw: &Raw, what: &str, size: usize) {
    let (m, lo, hi, at) = raw_chain_gpu(raw, size);
    raw.bind();
    let limit = |l| result::ctx::get_limit(l).unwrap_or(0);
    let limits = format!(
        "stack {} B, printf FIFO {} B, heap {} B",
        limit(sys::CUlimit::CU_LIMIT_STACK_SIZE),
        limit(sys::CUlimit::CU_LIMIT_PRINTF_FIFO_SIZE),
        limit(sys::CUlimit::CU_LIMIT_MALLOC_HEAP_SIZE)
    );
    let (reserved, used) = raw.pool_bytes();
    println!(
        "graph_probe\t{m:.3}\tus\traw chain device time per replay, {what} ({at}; {limits}; default pool: \
         {reserved} B reserved, {used} B used)\t{lo:.3}\t{hi:.3}"
    );
}

/// `gpu graph-probe-adds`: the raw chain's device time after each of 12 locus adds whose
/// outputs are kept (each a new block), then after each of 12 whose outputs are dropped
/// (the block cached and reused): which add, and which kind, slows it.
pub(crate) fn probe_adds(raw: &Raw) {
    let sync = || Stream::<G>::default_stream().unwrap().synchronize().unwrap();
    probe_stage(raw, "fresh process");
    // What a locus add does to the driver, done raw first: a 4 KiB block from the pool
    // on a stream, written by one launch, then by ten more.
    let _block = raw.block(BlockFrom::Pool, 4096, 1);
    probe_stage(raw, "after a raw cuMemAllocAsync block written once");
    let _block2 = raw.block(BlockFrom::Pool, 4096, 10);
    probe_stage(raw, "after another raw pool block written 10 times");
    let x = Tensor::<G>::ones([N]).unwrap();
    sync();
    probe_stage(raw, "after locus's ones");
    let mut kept = Vec::new();
    for i in 1..=12 {
        kept.push((&x + &x).unwrap());
        sync();
        probe_stage(raw, &format!("after kept add {i}"));
    }
    for i in 1..=12 {
        drop((&x + &x).unwrap());
        sync();
        probe_stage(raw, &format!("after dropped add {i}"));
    }
    // Then each buffer in a 64 MiB allocation of its own: if the chain is fast again,
    // where its buffers lie is what the adds changed.
    probe_stage_sized(raw, "with each buffer at the start of a 64 MiB allocation", 64 << 20);
    probe_stage(raw, "again as before");
}

/// `gpu graph-probe-repeat`: nothing of locus at all, only the raw chain, captured, timed
/// and destroyed 30 times over (each a probe stage), with one chain kept from the start
/// and timed again after every fifth: is the step the count of graphs the process made
/// (graph-probe's slow stages began at its 14th), not what locus did before it?
pub(crate) fn probe_repeat(raw: &Raw) {
    let kept = RawChain::capture(raw, N * 4);
    let time_kept = |what: &str| {
        let (m, lo, hi) = stats(&kept.gpu_times(raw));
        println!("graph_probe\t{m:.3}\tus\tthe first raw chain, kept and timed again, {what}\t{lo:.3}\t{hi:.3}");
    };
    time_kept("at the start");
    for i in 1..=30 {
        probe_stage(raw, &format!("raw graph {i} of the process (no locus)"));
        if i % 5 == 0 {
            time_kept(&format!("after {i} more raw graphs"));
        }
    }
    // SAFETY: `raw.time` synchronized its last event, after every replay: nothing runs.
    unsafe { kept.destroy() };
}

/// `gpu graph-probe-idle`: locus's `ones` and one add, then the raw chain after each
/// second of doing nothing, ten times, then after 12 kept adds: is the step a matter of
/// time since locus began (a thread of its own), not of the adds?
pub(crate) fn probe_idle(raw: &Raw) {
    let sync = || Stream::<G>::default_stream().unwrap().synchronize().unwrap();
    probe_stage(raw, "fresh process");
    let x = Tensor::<G>::ones([N]).unwrap();
    let first = (&x + &x).unwrap();
    sync();
    probe_stage(raw, "after locus's ones and one add");
    for i in 1..=10 {
        std::thread::sleep(std::time::Duration::from_secs(1));
        probe_stage(raw, &format!("after {i} s more of nothing"));
    }
    let kept: Vec<_> = (0..12).map(|_| (&x + &x).unwrap()).collect();
    sync();
    probe_stage(raw, "after 12 kept adds");
    drop((first, kept));
}

/// The variants of `gpu graph-probe-kind`, each run in a process of its own.
pub(crate) const PROBE_KINDS: [&str; 13] = [
    "locus-add",
    "locus-side-stream",
    "locus-ones",
    "locus-relu",
    "raw-locus-add",
    "raw-second-stream",
    "locus-add-dropped",
    "raw-pool",
    "raw-pool-unwritten",
    "raw-pool-freed",
    "raw-pool-big",
    "raw-plain",
    "own-pool",
];

/// `gpu graph-probe-kind KIND`: the raw chain after each of 20 things of one kind, in a
/// process that did nothing else. On an H100 (session 48) the chain stepped from 21.3 to
/// 24.5–25.1 µs at locus's seventh add, kept or dropped (the pool's usage constant), and
/// never with 20 raw blocks from the default pool (written, unwritten, freed, large), from
/// `cuMemAlloc` or from a pool of its own. The kinds that tell the rest apart: any locus
/// launch or the add's (`locus-ones`, `locus-relu`), locus's add kernel launched raw on the
/// raw stream (`raw-locus-add`), the raw copy kernel on a second raw stream, then that
/// stream destroyed (`raw-second-stream`), locus's adds on a side stream, then it dropped
/// (`locus-side-stream`).
/// `kind` is one of [`PROBE_KINDS`] (checked by the caller before the driver starts).
pub(crate) fn probe_kind(raw: &Raw, kind: &str) {
    let sync = || Stream::<G>::default_stream().unwrap().synchronize().unwrap();
    probe_stage(raw, &format!("{kind}: fresh process"));
    let own = (kind == "own-pool").then(|| raw.own_pool());
    let locus_add = (kind == "raw-locus-add").then(|| {
        (
            raw.function(&locus_kernels::Source::Elementwise.program(), "add_small_f32"),
            raw.block(BlockFrom::Plain, 4096, 0),
        )
    });
    // A stream of the raw context besides the raw one, destroyed after its 20 launches.
    let second =
        (kind == "raw-second-stream").then(|| result::stream::create(result::stream::StreamKind::NonBlocking).unwrap());
    let side = (kind == "locus-side-stream").then(|| Stream::<G>::new().unwrap());
    let x = kind.starts_with("locus").then(|| {
        let x = Tensor::<G>::ones([N]).unwrap();
        sync();
        probe_stage(raw, &format!("{kind}: after locus's ones"));
        x
    });
    let (mut kept, mut blocks) = (Vec::new(), Vec::new());
    for i in 1..=20 {
        match (kind, &x) {
            ("locus-add", Some(x)) => kept.push((x + x).unwrap()),
            ("locus-add-dropped", Some(x)) => drop((x + x).unwrap()),
            ("locus-side-stream", Some(x)) => {
                let side = side.as_ref().unwrap();
                kept.push(on_stream(side, || x + x).unwrap());
                side.synchronize().unwrap();
            }
            ("locus-ones", Some(_)) => kept.push(Tensor::<G>::ones([N]).unwrap()),
            ("locus-relu", Some(x)) => kept.push(x.relu().unwrap()),
            // SAFETY: `add_small_f32(const float*, const float*, float*, u64, int*)`, into a 4 KiB block.
            ("raw-locus-add", _) => unsafe {
                raw.launch_small_binary(locus_add.unwrap().0, locus_add.unwrap().1, std::ptr::null_mut())
            },
            ("raw-second-stream", _) => raw.small_copy_on(second.unwrap()),
            ("raw-pool" | "raw-pool-freed", _) => blocks.push(raw.block(BlockFrom::Pool, 4096, 1)),
            ("raw-pool-unwritten", _) => blocks.push(raw.block(BlockFrom::Pool, 4096, 0)),
            ("raw-pool-big", _) if i <= 3 => {
                blocks.push(raw.block(BlockFrom::Pool, [64 << 10, 1 << 20, 16 << 20][i - 1], 1))
            }
            ("raw-plain", _) => blocks.push(raw.block(BlockFrom::Plain, 4096, 1)),
            ("own-pool", _) => blocks.push(raw.block(BlockFrom::Own(own.unwrap()), 4096, 1)),
            _ => break,
        }
        sync();
        probe_stage(raw, &format!("{kind}: after {i}"));
    }
    // Is the state the second stream's while it lives, or for good?
    // And is it the old stream's, or the context's: a chain on a stream made after the
    // second's launches, while it lives and once it is gone (the C++ baseline makes its
    // graph's stream after destroying its eager rows' stream).
    if let Some(second) = second {
        probe_stage(&Raw::new(), &format!("{kind}: on a new raw stream, the second still alive"));
        // SAFETY: every launch on it was waited for (`small_copy_on`); nothing uses it after.
        unsafe { result::stream::destroy(second).unwrap() };
        probe_stage(raw, &format!("{kind}: after the second stream is destroyed"));
        probe_stage(&Raw::new(), &format!("{kind}: on a new raw stream made after the second is destroyed"));
    }
    if let Some(side) = side {
        kept.clear();
        drop(side);
        probe_stage(raw, &format!("{kind}: after the outputs and the side stream are dropped"));
    }
    if kind == "raw-pool-freed" {
        for p in blocks.drain(..) {
            raw.free_pool_block(p);
        }
        probe_stage(raw, &format!("{kind}: after all 20 freed"));
        for i in 1..=3 {
            blocks.push(raw.block(BlockFrom::Pool, 4096, 1));
            probe_stage(raw, &format!("{kind}: after {i} again"));
        }
    }
    drop((kept, x));
}

pub(crate) fn probe(raw: &Raw) {
    let stage = |what: &str| probe_stage(raw, what);
    stage("fresh process");
    for _ in 0..20_000 {
        raw.launch_small_copy();
    }
    raw.sync_ctx();
    stage("after 20000 raw launches");
    raw.keep_pool_memory();
    stage("after the pool's release threshold is set as locus sets it");
    for source in locus_kernels::Source::ALL {
        raw.load_program(&source.program(), &["-std=c++17"]);
        stage(&format!("after locus's {} loaded as a raw module", source.file()));
    }
    let _ = Tensor::<G>::ones([1]).unwrap();
    stage("after locus's first tensor");
    let _ = Tensor::<G>::ones([1]).unwrap().sum().unwrap().item().unwrap();
    stage("after locus's first sum");
    let x = Tensor::<G>::ones([N]).unwrap();
    stage("after locus's ones");
    for n in [1, 10, 100, 1000] {
        for _ in 0..n {
            drop((&x + &x).unwrap());
        }
        Stream::<G>::default_stream().unwrap().synchronize().unwrap();
        stage(&format!("after {n} more locus adds"));
    }
    let kept: Vec<_> = (0..100).map(|_| (&x + &x).unwrap()).collect();
    Stream::<G>::default_stream().unwrap().synchronize().unwrap();
    stage("after 100 more locus adds, their outputs kept");
    drop(kept);
    stage("after those 100 outputs are dropped");
    let r = Tensor::<G>::rand([N], 1).unwrap();
    Stream::<G>::default_stream().unwrap().synchronize().unwrap();
    stage("after locus's rand");
    drop(r);
    for _ in 0..20_000 {
        drop((&x + &x).unwrap());
    }
    Stream::<G>::default_stream().unwrap().synchronize().unwrap();
    stage("after 20000 more locus adds");
    locus::synchronize(locus::DeviceId::Cuda(0)).unwrap();
    stage("after locus::synchronize");
    let side = Stream::<G>::new().unwrap();
    drop(side);
    stage("after a locus stream");
    let stream = Stream::<G>::new().unwrap();
    let mut x = Tensor::<G>::rand([N], 1).unwrap();
    let mut b = Tensor::<G>::rand([N], 2).unwrap();
    let mut g = Graph::capture(&stream, (&mut x, &mut b), |(x, b)| crate::graph::chain(x, b)).unwrap();
    stage("after a locus capture");
    for _ in 0..1000 {
        let _ = g.replay().unwrap();
    }
    stream.synchronize().unwrap();
    stage("after 1000 locus replays");
    let t: Vec<f64> = stream_time(&stream, || {
        for _ in 0..GPU_REPLAYS {
            let _ = g.replay().unwrap();
        }
    })
    .into_iter()
    .map(|t| t / GPU_REPLAYS as f64 * 1e6)
    .collect();
    row("graph_probe_locus_gpu", &t, "us", "locus Graph::replay device time per replay, after the stages above");
    drop(g);
    stage("after the locus graph is dropped");
    probe_stage_sized(raw, "with each buffer at the start of a 64 MiB allocation", 64 << 20);
}

/// The raw side alone (`gpu graph-raw`, in a process where locus has done nothing), after
/// `#` lines naming what the process runs on: the NVRTC and driver versions, the PTX's
/// header, and the CUDA libraries it loaded (the C++ baseline links its own).
pub(crate) fn rows_raw(raw: &Raw) {
    let (mut major, mut minor, mut driver) = (0, 0, 0);
    // SAFETY: both calls write plain integers through valid pointers; cudarc loaded both
    // libraries when `raw` was made.
    unsafe {
        let _ = cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor);
        let _ = sys::cuDriverGetVersion(&mut driver);
    }
    println!("# nvrtc {major}.{minor}, driver API {driver}, PTX: {}", raw.ptx_header());
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let mut libs: Vec<&str> = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .filter(|p| p.contains("libcuda") || p.contains("libnvrtc") || p.contains("libnvJitLink"))
        .collect();
    libs.dedup();
    println!("# loaded: {}", libs.join(" "));
    raw_side(raw);
}

/// Every row (`gpu breakdown`, and the full run).
pub(crate) fn rows_all(raw: &Raw) {
    raw_side(raw);
    locus_side();
}
