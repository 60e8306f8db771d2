//! GPU benchmarks of locus, with the ceilings of the same machine measured in the same
//! run. Prints one tab-separated line per row: `row  value  unit  note`; a row whose
//! feature has not landed prints `n/a`. `benches/compare.sh` joins this with
//! `benches/torch_baseline.py` into one table.
//!
//!     LOCUS_BACKEND=cuda cargo bench --bench gpu        (or the bundled binary)

use std::ffi::c_void;
use std::time::Instant;

use cudarc::driver::{result, sys, CudaContext};
use locus::parallel::{DataParallel, Module};
use locus::{on_stream, synchronize, Cpu, Cuda, Device, DeviceId, Event, Stream, Tensor, ToDevice};

type G = Cuda<0>;
const GIB: usize = 1 << 30;
const MIB: usize = 1 << 20;

fn row(name: &str, value: Option<f64>, unit: &str, note: &str) {
    match value {
        Some(v) => println!("{name}\t{v:.3}\t{unit}\t{note}"),
        None => println!("{name}\tn/a\t{unit}\t{note}"),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Median seconds of `f` over `reps` runs after `warm` runs, timed with CUDA events on
/// the default stream.
fn gpu_time(warm: usize, reps: usize, mut f: impl FnMut()) -> f64 {
    let s = Stream::<G>::default_stream().unwrap();
    for _ in 0..warm {
        f();
    }
    let mut t = Vec::new();
    for _ in 0..reps {
        let (a, b) = (Event::<G>::new().unwrap(), Event::<G>::new().unwrap());
        a.record(&s).unwrap();
        f();
        b.record(&s).unwrap();
        b.synchronize().unwrap();
        t.push(a.elapsed(&b).unwrap().as_secs_f64());
    }
    median(t)
}

/// Median seconds of `f` timed with events on `s` (the work `f` queues there).
fn stream_time(s: &Stream<G>, warm: usize, reps: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..warm {
        f();
    }
    s.synchronize().unwrap();
    let mut t = Vec::new();
    for _ in 0..reps {
        let a = s.record_event().unwrap();
        f();
        let b = s.record_event().unwrap();
        b.synchronize().unwrap();
        t.push(a.elapsed(&b).unwrap().as_secs_f64());
    }
    median(t)
}

/// Median wall seconds of `f` (which synchronises itself) over `reps` runs.
fn wall_time(warm: usize, reps: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..warm {
        f();
    }
    median(
        (0..reps)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

/// The ceilings: raw driver calls through cudarc, on locus' device 0 context.
struct Raw {
    stream: sys::CUstream,
    copy: sys::CUfunction,
    empty: sys::CUfunction,
    _ctx: std::sync::Arc<CudaContext>,
    _module: std::sync::Arc<cudarc::driver::CudaModule>,
}

const RAW_KERNELS: &str = r#"
extern "C" __global__ void empty() {}
extern "C" __global__ void copy4(const float4* __restrict__ x, float4* __restrict__ y, unsigned long long n) {
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (unsigned long long)gridDim.x * blockDim.x) y[i] = x[i];
}
"#;

impl Raw {
    fn new() -> Raw {
        let ctx = CudaContext::new(0).unwrap();
        ctx.bind_to_thread().unwrap();
        let (maj, min) = ctx.compute_capability().unwrap();
        let opts = cudarc::nvrtc::CompileOptions {
            options: vec![format!("--gpu-architecture=compute_{maj}{min}")],
            ..Default::default()
        };
        let module = ctx.load_module(cudarc::nvrtc::compile_ptx_with_opts(RAW_KERNELS, opts).unwrap()).unwrap();
        let copy = module.load_function("copy4").unwrap().cu_function();
        let empty = module.load_function("empty").unwrap().cu_function();
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking).unwrap();
        Raw { stream, copy, empty, _ctx: ctx, _module: module }
    }

    fn bind(&self) {
        self._ctx.bind_to_thread().unwrap();
    }

    fn sync(&self) {
        // SAFETY: `self.stream` was created in `Raw::new` and is never destroyed.
        unsafe { result::stream::synchronize(self.stream) }.unwrap();
    }

    fn time(&self, reps: usize, mut f: impl FnMut()) -> f64 {
        self.bind();
        f();
        self.sync();
        let mut t = Vec::new();
        for _ in 0..reps {
            let (a, b) = (
                result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).unwrap(),
                result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).unwrap(),
            );
            // SAFETY: `a` and `b` were just created on the bound context and are destroyed
            // only after `b` completed; `self.stream` lives as long as `self`.
            unsafe {
                result::event::record(a, self.stream).unwrap();
                f();
                result::event::record(b, self.stream).unwrap();
                result::event::synchronize(b).unwrap();
                t.push(result::event::elapsed(a, b).unwrap() as f64 / 1e3);
                result::event::destroy(a).unwrap();
                result::event::destroy(b).unwrap();
            }
        }
        median(t)
    }
}

fn ceilings(raw: &Raw) -> (f64, f64) {
    raw.bind();
    let bytes = GIB;
    // SAFETY: plain allocations on the bound context; freed below, after every use.
    let (x, y) = unsafe { (result::malloc_sync(bytes).unwrap(), result::malloc_sync(bytes).unwrap()) };
    // SAFETY: `x` and `y` are distinct allocations of `bytes` bytes, alive until freed below.
    let ce = raw.time(10, || unsafe { result::memcpy_dtod_async(y, x, bytes, raw.stream).unwrap() });
    let ce_gbs = 2.0 * bytes as f64 / ce / 1e9;
    row("ceiling_d2d_copy_engine", Some(ce_gbs), "GB/s", "cuMemcpyDtoDAsync 1 GiB, read+write");
    let n = (bytes / 16) as u64;
    // SAFETY: `copy4(x, y, n)` reads and writes `n` float4s, which `x` and `y` hold; the
    // argument pointers point at the locals `x`, `y` and `n`, alive during the launch.
    let kernel = raw.time(10, || unsafe {
        let mut args = [&x as *const _ as *mut c_void, &y as *const _ as *mut c_void, &n as *const _ as *mut c_void];
        result::launch_kernel(raw.copy, (132 * 8, 1, 1), (256, 1, 1), 0, raw.stream, &mut args).unwrap();
    });
    let k_gbs = 2.0 * bytes as f64 / kernel / 1e9;
    row("ceiling_d2d_copy_kernel", Some(k_gbs), "GB/s", "float4 grid-stride copy 1 GiB, read+write");
    // SAFETY: `raw.time` synchronized the stream, so no work uses `x` or `y` any more.
    unsafe {
        result::free_sync(x).unwrap();
        result::free_sync(y).unwrap();
    }
    // Launch floor: back-to-back empty launches, host wall time per launch.
    let launches = 20_000;
    raw.sync();
    let t = Instant::now();
    for _ in 0..launches {
        // SAFETY: `empty` takes no arguments and touches no memory.
        unsafe { result::launch_kernel(raw.empty, (1, 1, 1), (1, 1, 1), 0, raw.stream, &mut []).unwrap() };
    }
    raw.sync();
    let floor = t.elapsed().as_secs_f64() / launches as f64 * 1e6;
    row("ceiling_launch_floor", Some(floor), "us", "empty kernel, raw cuLaunchKernel back to back");
    // Pinned copies through raw cudarc calls.
    for size in [MIB, 16 * MIB, 256 * MIB] {
        // SAFETY: a plain page-locked allocation of `size` bytes, freed below.
        let host = unsafe { result::malloc_host(size, 0).unwrap() } as *mut u8;
        // SAFETY: a plain device allocation of `size` bytes, freed below.
        let dev = unsafe { result::malloc_sync(size).unwrap() };
        // SAFETY: `host` holds `size` bytes that only this slice uses until it is freed; the
        // copies below only move those bytes (their values do not matter).
        let slice = unsafe { std::slice::from_raw_parts_mut(host, size) };
        // SAFETY: `dev` and `slice` hold `size` bytes each; `raw.time` synchronizes before
        // it returns, so the copies end before the memory is reused or freed.
        let h2d = raw.time(10, || unsafe { result::memcpy_htod_async(dev, &slice[..], raw.stream).unwrap() });
        // SAFETY: as for the H2D copy above.
        let d2h = raw.time(10, || unsafe { result::memcpy_dtoh_async(&mut slice[..], dev, raw.stream).unwrap() });
        let mb = size / MIB;
        row(&format!("ceiling_h2d_pinned_{mb}MiB"), Some(size as f64 / h2d / 1e9), "GB/s", "raw cuMemcpyHtoDAsync");
        row(&format!("ceiling_d2h_pinned_{mb}MiB"), Some(size as f64 / d2h / 1e9), "GB/s", "raw cuMemcpyDtoHAsync");
        // SAFETY: the copies were synchronized by `raw.time`; nothing uses the memory now.
        unsafe {
            result::free_sync(dev).unwrap();
            result::free_host(host as *mut c_void).unwrap();
        }
    }
    // Both directions at once, each on its own stream: can H2D and D2H overlap here?
    let size = 256 * MIB;
    // SAFETY: plain page-locked allocations of `size` bytes, freed below.
    let (h_in, h_out) = unsafe { (result::malloc_host(size, 0).unwrap(), result::malloc_host(size, 0).unwrap()) };
    // SAFETY: plain device allocations of `size` bytes, freed below.
    let (d_in, d_out) = unsafe { (result::malloc_sync(size).unwrap(), result::malloc_sync(size).unwrap()) };
    let other = result::stream::create(result::stream::StreamKind::NonBlocking).unwrap();
    // SAFETY: `h_in` holds `size` bytes, used only through this slice until freed.
    let src = unsafe { std::slice::from_raw_parts(h_in as *const u8, size) };
    // SAFETY: `h_out` holds `size` bytes, used only through this slice until freed.
    let dst = unsafe { std::slice::from_raw_parts_mut(h_out as *mut u8, size) };
    // SAFETY: each buffer holds `size` bytes; both streams are synchronized before the
    // closure returns, so no copy outlives a round.
    let both = wall_time(2, 5, || unsafe {
        result::memcpy_htod_async(d_in, src, raw.stream).unwrap();
        result::memcpy_dtoh_async(&mut dst[..], d_out, other).unwrap();
        result::stream::synchronize(raw.stream).unwrap();
        result::stream::synchronize(other).unwrap();
    });
    row(
        "ceiling_bidirectional_256MiB",
        Some(2.0 * size as f64 / both / 1e9),
        "GB/s",
        "raw H2D and D2H at once on two streams, sum of both",
    );
    // SAFETY: both streams were synchronized; nothing uses these buffers or `other` now.
    unsafe {
        result::free_sync(d_in).unwrap();
        result::free_sync(d_out).unwrap();
        result::free_host(h_in).unwrap();
        result::free_host(h_out).unwrap();
        result::stream::destroy(other).unwrap();
    }
    (ce_gbs, floor)
}

fn copies() {
    for size in [MIB, 16 * MIB, 256 * MIB] {
        let mb = size / MIB;
        let host = Tensor::<Cpu, u8>::full([size], 1).unwrap();
        let h2d = wall_time(3, 10, || {
            let d = host.to::<G>().unwrap();
            synchronize(DeviceId::Cuda(0)).unwrap();
            drop(d);
        });
        row(&format!("h2d_pageable_{mb}MiB"), Some(size as f64 / h2d / 1e9), "GB/s", "Tensor<Cpu>::to::<Cuda<0>>()");
        let dev = host.to::<G>().unwrap();
        let d2h = wall_time(3, 10, || drop(dev.to::<Cpu>().unwrap()));
        row(&format!("d2h_pageable_{mb}MiB"), Some(size as f64 / d2h / 1e9), "GB/s", "Tensor<Cuda<0>>::to::<Cpu>()");
        let pinned = host.pin_memory().unwrap();
        let s = Stream::<G>::new().unwrap();
        let h2d = stream_time(&s, 3, 10, || drop(pinned.to_async(&s).unwrap().tensor().clone()));
        row(&format!("h2d_pinned_{mb}MiB"), Some(size as f64 / h2d / 1e9), "GB/s", "Tensor<Pinned>::to_async");
        let d2h = stream_time(&s, 3, 10, || drop(dev.to_pinned_async(&s).unwrap()));
        row(&format!("d2h_pinned_{mb}MiB"), Some(size as f64 / d2h / 1e9), "GB/s", "Tensor<Cuda<0>>::to_pinned_async");
    }
}

fn small_ops() {
    let a = Tensor::<G>::rand([1024], 1).unwrap();
    let b = Tensor::<G>::rand([1024], 2).unwrap();
    let n = 20_000;
    let mut submit = Vec::new();
    let mut synced = Vec::new();
    for _ in 0..5 {
        synchronize(DeviceId::Cuda(0)).unwrap();
        let t = Instant::now();
        for _ in 0..n {
            drop((&a + &b).unwrap());
        }
        submit.push(t.elapsed().as_secs_f64() / n as f64 * 1e6);
        synchronize(DeviceId::Cuda(0)).unwrap();
        let t = Instant::now();
        for _ in 0..n / 10 {
            drop((&a + &b).unwrap());
            synchronize(DeviceId::Cuda(0)).unwrap();
        }
        synced.push(t.elapsed().as_secs_f64() / (n / 10) as f64 * 1e6);
    }
    row("small_add_1k_submit", Some(median(submit)), "us/op", "1024-element add, host time per op, no sync");
    row("small_add_1k_sync", Some(median(synced)), "us/op", "1024-element add + synchronize per op");
}

fn large_ops() {
    let n = GIB / 4; // 256 Mi f32 = 1 GiB per tensor
    let a = Tensor::<G>::rand([n], 1).unwrap();
    let b = Tensor::<G>::rand([n], 2).unwrap();
    let bytes = (n * 4) as f64;
    let add = gpu_time(3, 10, || drop((&a + &b).unwrap()));
    row("large_add_1GiB", Some(3.0 * bytes / add / 1e9), "GB/s", "f32 add, 2 reads + 1 write");
    let mul = gpu_time(3, 10, || drop((&a * &b).unwrap()));
    row("large_mul_1GiB", Some(3.0 * bytes / mul / 1e9), "GB/s", "f32 mul, 2 reads + 1 write");
    let relu = gpu_time(3, 10, || drop(a.relu().unwrap()));
    row("large_relu_1GiB", Some(2.0 * bytes / relu / 1e9), "GB/s", "f32 relu, 1 read + 1 write");
    let sum = gpu_time(3, 10, || drop(a.sum().unwrap()));
    row("sum_1GiB", Some(bytes / sum / 1e9), "GB/s", "f32 sum of 256 Mi elements, 1 read");
}

fn matmul() {
    let n = 4096;
    let a = Tensor::<G>::rand([n, n], 1).unwrap();
    let b = Tensor::<G>::rand([n, n], 2).unwrap();
    let t = gpu_time(3, 10, || drop(a.matmul(&b).unwrap()));
    row("matmul_4096_f32", Some(2.0 * (n as f64).powi(3) / t / 1e12), "TFLOP/s", "cuBLAS sgemm, no TF32");
}

fn guard() {
    let _outer = locus::DeviceGuard::enter(DeviceId::Cuda(0)).unwrap();
    let rounds = 2_000_000u32;
    let mut t = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        for _ in 0..rounds {
            drop(std::hint::black_box(locus::DeviceGuard::enter(DeviceId::Cuda(0)).unwrap()));
        }
        t.push(start.elapsed().as_nanos() as f64 / rounds as f64);
    }
    row(
        "guard_enter_exit_same_device",
        Some(median(t)),
        "ns",
        "DeviceGuard::enter(cuda:0) + drop, cuda:0 already current",
    );
}

fn pool_steady_state() {
    let s = Stream::<G>::new().unwrap();
    let src = Tensor::<Cpu>::rand([4 << 20], 3).unwrap();
    let step = || {
        let p = src.pin_memory().unwrap();
        let d = p.to_async(&s).unwrap().wait().unwrap();
        drop(d.to_pinned_async(&s).unwrap().wait().unwrap());
    };
    for _ in 0..3 {
        step();
    }
    let warm = locus::pinned_stats().host_allocs;
    for _ in 0..50 {
        step();
    }
    let new = locus::pinned_stats().host_allocs - warm;
    row(
        "pinned_pool_steady_allocs",
        Some(new as f64),
        "allocs",
        "cuMemHostAlloc calls in 50 pin+H2D+D2H rounds after warm-up",
    );
}

/// A chunked H2D -> kernel -> D2H pipeline on three streams, against the slowest stage
/// run alone (the ideal). 256 MiB in chunks of `PIPELINE_CHUNK_MIB` (default 16).
fn pipeline() {
    let mib = std::env::var("PIPELINE_CHUNK_MIB").ok().and_then(|v| v.parse().ok()).filter(|&m| (1..=256).contains(&m));
    let mib: usize = mib.unwrap_or(16);
    let (chunks, n) = (256 / mib, mib << 18); // f32 elements per chunk
    let srcs: Vec<_> = (0..chunks).map(|i| Tensor::<Cpu>::full([n], i as f32).unwrap().pin_memory().unwrap()).collect();
    let (h2d, comp, d2h) = (Stream::<G>::new().unwrap(), Stream::<G>::new().unwrap(), Stream::<G>::new().unwrap());
    let kernel = |x: &Tensor<G>| (x * 2.0).unwrap().relu().unwrap();
    let run = || {
        let t = Instant::now();
        // Each chunk's three steps are queued together, so its D2H can start as soon as
        // its kernel is done, while later chunks are still being queued.
        let (mut transfers, mut outs, mut back) = (Vec::new(), Vec::new(), Vec::new());
        for p in &srcs {
            let tr = p.to_async(&h2d).unwrap();
            let out = on_stream(&comp, || kernel(tr.tensor()));
            back.push(out.to_pinned_async(&d2h).unwrap());
            outs.push(out);
            transfers.push(tr);
        }
        for b in back {
            drop(b.wait().unwrap());
        }
        drop(transfers);
        t.elapsed().as_secs_f64()
    };
    run();
    let piped = median((0..5).map(|_| run()).collect());
    let on_dev: Vec<_> = srcs.iter().map(|p| p.to_async(&h2d).unwrap().wait().unwrap()).collect();
    let stage = |f: &dyn Fn()| {
        median(
            (0..5)
                .map(|_| {
                    synchronize(DeviceId::Cuda(0)).unwrap();
                    let t = Instant::now();
                    f();
                    synchronize(DeviceId::Cuda(0)).unwrap();
                    t.elapsed().as_secs_f64()
                })
                .collect(),
        )
    };
    let t_h2d = stage(&|| srcs.iter().for_each(|p| drop(p.to_async(&h2d).unwrap().tensor().clone())));
    let t_comp = stage(&|| on_dev.iter().for_each(|x| drop(on_stream(&comp, || kernel(x)))));
    let t_d2h = stage(&|| on_dev.iter().for_each(|x| drop(x.to_pinned_async(&d2h).unwrap())));
    let ideal = t_h2d.max(t_comp).max(t_d2h);
    row(
        "pipeline_vs_ideal",
        Some(piped / ideal),
        "x",
        &format!(
            "{chunks} x {mib} MiB H2D->x*2,relu->D2H on 3 streams {:.2} ms; stages alone {:.2}/{:.2}/{:.2} ms",
            piped * 1e3,
            t_h2d * 1e3,
            t_comp * 1e3,
            t_d2h * 1e3
        ),
    );
}

/// `relu(x @ w)`: the module of the DataParallel row.
#[derive(ToDevice)]
struct Layer<D: Device> {
    w: Tensor<D>,
}

impl<D: Device> Module<D> for Layer<D> {
    fn forward(&self, x: &Tensor<D>) -> locus::Result<Tensor<D>> {
        x.matmul(&self.w)?.relu()
    }
}

fn data_parallel() {
    let ids = locus::devices().unwrap();
    let dp = DataParallel::new(Layer { w: Tensor::<G>::rand([1024, 1024], 1).unwrap() }, &ids, Cuda::<0>).unwrap();
    let layer = dp.module();
    let x = Tensor::<G>::rand([8192, 1024], 2).unwrap();
    let sync = || synchronize(DeviceId::Cuda(0)).unwrap();
    let parallel = wall_time(3, 20, || {
        drop(dp.forward(&x).unwrap());
        sync();
    });
    let alone = wall_time(3, 20, || {
        drop(layer.forward(&x).unwrap());
        sync();
    });
    let note = format!(
        "relu([8192, 1024] @ [1024, 1024]) over {} GPU(s), gathered on cuda:0; the same on cuda:0 alone: {:.3} ms",
        ids.len(),
        alone * 1e3
    );
    row("data_parallel_forward", Some(parallel * 1e3), "ms", &note);
}

fn main() {
    match locus::backend_name() {
        Ok("cuda") => {}
        other => {
            println!("# gpu bench: needs the cuda backend (got {other:?}); nothing measured");
            return;
        }
    }
    // Touch device 0 through locus first so its context and kernels are ready.
    let _ = Tensor::<G>::ones([1]).unwrap().sum().unwrap().item().unwrap();
    println!("# row\tvalue\tunit\tnote");
    if std::env::args().any(|a| a == "pipeline") {
        pipeline(); // the one row alone: `gpu pipeline`
        return;
    }
    let raw = Raw::new();
    ceilings(&raw);
    copies();
    small_ops();
    large_ops();
    matmul();
    guard();
    pool_steady_state();
    pipeline();
    data_parallel();
}
