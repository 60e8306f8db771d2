//! The ceilings: what the machine does through raw driver calls (cudarc), with no locus
//! code in the path, measured in the same run as the locus rows and by the same method.

use std::ffi::c_void;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{result, sys, CudaContext, CudaModule};

use crate::method::{gbs, median, row, row_na, samples};
use crate::{GIB, MIB};

/// Raw driver state on device 0's primary context (the one locus uses).
pub(crate) struct Raw {
    stream: sys::CUstream,
    /// Two 1024-float buffers and an event for the breakdown rows' small launches.
    small: (sys::CUdeviceptr, sys::CUdeviceptr, sys::CUevent),
    copy: sys::CUfunction,
    empty: sys::CUfunction,
    spin: sys::CUfunction,
    /// The C++ baseline's `add_f32` (one thread per element), for the raw graph chain.
    add: sys::CUfunction,
    sms: u64,
    threads_per_sm: u64,
    /// The `.version` and `.target` lines of the PTX NVRTC made for the raw kernels.
    ptx_header: String,
    ctx: Arc<CudaContext>,
    _module: Arc<CudaModule>,
}

/// The copy kernel is written like locus's elementwise kernels: 16-byte accesses, each
/// thread loads `UNROLL` vectors (a block apart) before it stores any, so that four
/// requests per thread are in flight; a grid-stride loop lets any grid cover the data.
const RAW_KERNELS: &str = r#"
extern "C" __global__ void empty() {}
__device__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
/* Holds its stream for `ns` nanoseconds: work queued behind it waits, so a timing can
   start only once all of it is queued. */
extern "C" __global__ void spin(unsigned long long ns) {
    const unsigned long long t0 = now_ns();
    while (now_ns() - t0 < ns) {}
}
extern "C" __global__ void add_f32(const float* __restrict__ a, const float* __restrict__ b, float* __restrict__ out, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = a[i] + b[i];
}
#define UNROLL 4
extern "C" __global__ void copy4(const float4* __restrict__ x, float4* __restrict__ y, unsigned long long n) {
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x * UNROLL;
    for (unsigned long long base = (unsigned long long)blockIdx.x * blockDim.x * UNROLL + threadIdx.x; base < n; base += step) {
        float4 v[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const unsigned long long i = base + (unsigned long long)u * blockDim.x;
            if (i < n) v[u] = x[i];
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const unsigned long long i = base + (unsigned long long)u * blockDim.x;
            if (i < n) y[i] = v[u];
        }
    }
}
"#;

/// Where [`Raw::block`] takes a block from.
#[derive(Clone, Copy)]
pub(crate) enum BlockFrom {
    Pool,
    Own(sys::CUmemoryPool),
    Plain,
}

/// Launches per submit batch of the launch floor (as in the locus small-op rows); the
/// synchronized batch is a tenth of it.
pub(crate) const LAUNCHES: usize = 20_000;

impl Raw {
    pub(crate) fn new() -> Raw {
        let ctx = CudaContext::new(0).unwrap();
        ctx.bind_to_thread().unwrap();
        let (maj, min) = ctx.compute_capability().unwrap();
        let opts = cudarc::nvrtc::CompileOptions {
            options: vec![format!("--gpu-architecture=compute_{maj}{min}")],
            ..Default::default()
        };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(RAW_KERNELS, opts).unwrap();
        let ptx_header = ptx
            .to_src()
            .lines()
            .filter(|l| l.starts_with(".version") || l.starts_with(".target"))
            .collect::<Vec<_>>()
            .join(" ");
        let module = ctx.load_module(ptx).unwrap();
        let copy = module.load_function("copy4").unwrap().cu_function();
        let empty = module.load_function("empty").unwrap().cu_function();
        let spin = module.load_function("spin").unwrap().cu_function();
        let add = module.load_function("add_f32").unwrap().cu_function();
        let attr = |a| ctx.attribute(a).unwrap().max(1) as u64;
        let sms = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
        let threads_per_sm = attr(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking).unwrap();
        // SAFETY: plain allocations and an event on the bound context, kept for the process
        // (the bench holds one `Raw` to its end).
        let small = unsafe {
            (
                result::malloc_sync(4096).unwrap(),
                result::malloc_sync(4096).unwrap(),
                result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING).unwrap(),
            )
        };
        Raw { stream, small, copy, empty, spin, add, sms, threads_per_sm, ptx_header, ctx, _module: module }
    }

    /// Keeps freed stream-ordered memory in the device's default pool, as locus does.
    pub(crate) fn keep_pool_memory(&self) {
        self.bind();
        let mut threshold = u64::MAX;
        // SAFETY: the pool is the bound device's own; the attribute takes a `u64`, read
        // during the call only.
        unsafe {
            let pool = result::device::get_default_mem_pool(self.ctx.cu_device()).unwrap();
            result::mem_pool::set_attribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                &mut threshold as *mut u64 as *mut c_void,
            )
            .unwrap();
        }
    }

    /// The device's default pool: bytes reserved (mapped) and bytes in use now.
    pub(crate) fn pool_bytes(&self) -> (u64, u64) {
        self.bind();
        let (mut reserved, mut used) = (0u64, 0u64);
        // SAFETY: the pool is the bound device's own; both attributes are `u64`s written
        // through valid pointers during the call.
        unsafe {
            let pool = result::device::get_default_mem_pool(self.ctx.cu_device()).unwrap();
            let attr = sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT;
            result::mem_pool::get_attribute(pool, attr, &mut reserved as *mut u64 as *mut c_void).unwrap();
            let attr = sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT;
            result::mem_pool::get_attribute(pool, attr, &mut used as *mut u64 as *mut c_void).unwrap();
        }
        (reserved, used)
    }

    /// A 4 KiB-or-larger block of `bytes`, kept for the process, written by the copy kernel
    /// `launches` times (then synchronized), from where `from` says: the default pool on
    /// the raw stream (`Pool`), a pool made for it (`Own`, `cuMemPoolCreate`), or
    /// `cuMemAlloc` (`Plain`).
    pub(crate) fn block(&self, from: BlockFrom, bytes: usize, launches: usize) -> sys::CUdeviceptr {
        assert!(bytes >= 4096);
        self.bind();
        let mut p: sys::CUdeviceptr = 0;
        // SAFETY: each allocation is made on the bound context (on the raw stream where it is
        // stream-ordered) and written only within its first 4096 bytes from `small.0`, which
        // lives for the process; the stream is synchronized before the block is handed out.
        unsafe {
            match from {
                BlockFrom::Pool => p = result::malloc_async(self.stream, bytes).unwrap(),
                BlockFrom::Plain => p = result::malloc_sync(bytes).unwrap(),
                BlockFrom::Own(pool) => {
                    sys::cuMemAllocFromPoolAsync(&mut p, bytes, pool, self.stream).result().unwrap()
                }
            }
            for _ in 0..launches {
                self.copy_kernel(self.small.0, p, 256, 1);
            }
            result::stream::synchronize(self.stream).unwrap();
        }
        p
    }

    /// Gives a block of [`Raw::block`] from a pool back on the raw stream, and waits.
    pub(crate) fn free_pool_block(&self, p: sys::CUdeviceptr) {
        self.bind();
        // SAFETY: `p` came from a pool on this context; the stream's work on it (all
        // synchronized) is done and nothing uses it after.
        unsafe {
            result::free_async(p, self.stream).unwrap();
            result::stream::synchronize(self.stream).unwrap();
        }
    }

    /// A new memory pool of device 0's memory, kept for the process, that keeps what is
    /// freed into it (the release threshold locus sets on the default pool).
    pub(crate) fn own_pool(&self) -> sys::CUmemoryPool {
        self.bind();
        let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
        // SAFETY: the props are zeroed but for the allocation type and the location (device
        // 0, pinned device memory), as `cuMemPoolCreate` asks; the pool is written through a
        // valid pointer and never destroyed. The threshold is a `u64` read during the call.
        unsafe {
            let mut props: sys::CUmemPoolProps = std::mem::zeroed();
            props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
            props.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
            props.location.id = 0;
            sys::cuMemPoolCreate(&mut pool, &props).result().unwrap();
            let mut threshold = u64::MAX;
            result::mem_pool::set_attribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                &mut threshold as *mut u64 as *mut c_void,
            )
            .unwrap();
        }
        pool
    }

    /// `name` of `src`, compiled as locus compiles its sources (`-std=c++17`) and loaded as a
    /// raw module kept for the process.
    pub(crate) fn function(&self, src: &str, name: &str) -> sys::CUfunction {
        let module = self.load_module(src, &["-std=c++17"]);
        let f = module.load_function(name).unwrap().cu_function();
        std::mem::forget(module);
        f
    }

    /// Queues `f(a, b, out, n, err)` of locus's elementwise kernels (`{op}_small_{dtype}`:
    /// one element per thread) over the two small buffers into `out`, on `stream` (the
    /// raw stream when null), with no error flag, and waits.
    ///
    /// # Safety
    /// `f` is a function of that signature over `f32`, and `out` holds 1024 floats.
    pub(crate) unsafe fn launch_small_binary(&self, f: sys::CUfunction, out: sys::CUdeviceptr, stream: sys::CUstream) {
        let (a, b, n, err) = (self.small.0, self.small.1, 1024u64, 0u64);
        let mut args = [&a, &b, &out, &n, &err].map(|v| v as *const u64 as *mut c_void);
        let stream = if stream.is_null() { self.stream } else { stream };
        // SAFETY: five values in the kernel's order (three pointers, a u64 count, a null
        // flag pointer), read during the call; every buffer holds 1024 floats.
        unsafe {
            result::launch_kernel(f, (4, 1, 1), (256, 1, 1), 0, stream, &mut args).unwrap();
            result::stream::synchronize(stream).unwrap();
        }
    }

    /// The copy kernel over the small buffers on `stream`, and a wait for it.
    pub(crate) fn small_copy_on(&self, stream: sys::CUstream) {
        self.bind();
        // SAFETY: both buffers hold 4096 bytes (256 float4s) and live for the process;
        // `stream` is a live stream of this context (the caller's), synchronized here.
        unsafe {
            self.copy_kernel_on(stream, self.small.0, self.small.1, 256, 1);
            result::stream::synchronize(stream).unwrap();
        }
    }

    /// Compiles `src` with NVRTC for this device (and `options`) and loads it as a module
    /// kept for the process.
    pub(crate) fn load_program(&self, src: &str, options: &[&str]) {
        std::mem::forget(self.load_module(src, options));
    }

    /// `src` compiled with NVRTC for this device (and `options`) and loaded; the raw
    /// context bound again after (cudarc may change the current context).
    fn load_module(&self, src: &str, options: &[&str]) -> Arc<CudaModule> {
        let (maj, min) = self.ctx.compute_capability().unwrap();
        let mut all = vec![format!("--gpu-architecture=compute_{maj}{min}")];
        all.extend(options.iter().map(|o| o.to_string()));
        let opts = cudarc::nvrtc::CompileOptions { options: all, ..Default::default() };
        let module = self.ctx.load_module(cudarc::nvrtc::compile_ptx_with_opts(src, opts).unwrap()).unwrap();
        self.bind();
        module
    }

    pub(crate) fn bind(&self) {
        self.ctx.bind_to_thread().unwrap();
    }

    /// The `.version` and `.target` lines of the raw kernels' PTX.
    pub(crate) fn ptx_header(&self) -> &str {
        &self.ptx_header
    }

    /// The raw stream the ceilings queue on.
    pub(crate) fn stream(&self) -> sys::CUstream {
        self.stream
    }

    /// Queues `out = a + b` over `n` floats with the C++ baseline's grid (`n / 256` blocks of 256).
    ///
    /// # Safety
    /// `a`, `b` and `out` are device allocations of at least `n` floats, alive until the
    /// launch completes on `self.stream` (or, captured, until the graph's last replay does).
    pub(crate) unsafe fn add_f32(&self, a: sys::CUdeviceptr, b: sys::CUdeviceptr, out: sys::CUdeviceptr, n: i32) {
        let mut args = [
            &a as *const _ as *mut c_void,
            &b as *const _ as *mut c_void,
            &out as *const _ as *mut c_void,
            &n as *const _ as *mut c_void,
        ];
        let grid = (n as u32).div_ceil(256);
        // SAFETY: `add_f32(a, b, out, n)` takes three pointers and an int, given in order;
        // the memory is valid by the caller's contract, and `args` points at locals that
        // live through the call, which copies the values.
        unsafe { result::launch_kernel(self.add, (grid, 1, 1), (256, 1, 1), 0, self.stream, &mut args).unwrap() };
    }

    pub(crate) fn sync_ctx(&self) {
        self.bind();
        result::ctx::synchronize().unwrap();
    }

    /// Seconds per sample of the work `f` queues on `self.stream`, between two events.
    pub(crate) fn time(&self, f: impl FnMut()) -> Vec<f64> {
        self.time_after(|| {}, f)
    }

    /// [`Raw::time`] with `before` queued ahead of the first event of every sample.
    pub(crate) fn time_after(&self, mut before: impl FnMut(), mut f: impl FnMut()) -> Vec<f64> {
        self.bind();
        let (a, b) = (
            result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).unwrap(),
            result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).unwrap(),
        );
        let t = samples(|| {
            before();
            // SAFETY: as in `time`: both events live to the end of this function on the
            // bound context, `b` completes before the elapsed time is read.
            unsafe {
                result::event::record(a, self.stream).unwrap();
                f();
                result::event::record(b, self.stream).unwrap();
                result::event::synchronize(b).unwrap();
                result::event::elapsed(a, b).unwrap() as f64 / 1e3
            }
        });
        // SAFETY: both events completed (the last sample synchronized `b`).
        unsafe {
            result::event::destroy(a).unwrap();
            result::event::destroy(b).unwrap();
        }
        t
    }

    /// Queues the copy kernel over `n` float4s from `x` to `y` with `grid` blocks of 256.
    ///
    /// # Safety
    /// `x` and `y` are distinct device allocations of at least `n` float4s each, alive
    /// until the launch completes on `self.stream`.
    unsafe fn copy_kernel(&self, x: sys::CUdeviceptr, y: sys::CUdeviceptr, n: u64, grid: u32) {
        // SAFETY: the caller's contract, on the raw stream.
        unsafe { self.copy_kernel_on(self.stream, x, y, n, grid) }
    }

    /// [`Raw::copy_kernel`] on `stream`, a live stream of this context.
    ///
    /// # Safety
    /// As for [`Raw::copy_kernel`], with the launch completing on `stream`.
    unsafe fn copy_kernel_on(
        &self,
        stream: sys::CUstream,
        x: sys::CUdeviceptr,
        y: sys::CUdeviceptr,
        n: u64,
        grid: u32,
    ) {
        let mut args = [&x as *const _ as *mut c_void, &y as *const _ as *mut c_void, &n as *const _ as *mut c_void];
        // `copy4(x, y, n)` takes two pointers and a u64, given in order; the memory is valid
        // by the caller's contract, and `args` points at locals that live through the call.
        // SAFETY: as just said; the call copies the values.
        unsafe { result::launch_kernel(self.copy, (grid, 1, 1), (256, 1, 1), 0, stream, &mut args).unwrap() };
    }

    /// The copy kernel over the two 1024-float buffers of `small` (one block).
    pub(crate) fn launch_small_copy(&self) {
        // SAFETY: both buffers hold 4096 bytes (256 float4s) and live for the process.
        unsafe { self.copy_kernel(self.small.0, self.small.1, 256, 1) };
    }

    /// Records the small event on the raw stream.
    pub(crate) fn record(&self) {
        // SAFETY: the event and the stream were made on this context and live for the process.
        unsafe { result::event::record(self.small.2, self.stream).unwrap() };
    }

    /// Queues a one-thread kernel that holds the stream for `ns` nanoseconds.
    pub(crate) fn launch_spin(&self, ns: u64) {
        let mut ns = ns;
        let mut args = [(&raw mut ns).cast::<std::ffi::c_void>()];
        // SAFETY: `spin` takes one `unsigned long long`, passed by a pointer to a live u64
        // for the call, and touches no memory.
        unsafe { result::launch_kernel(self.spin, (1, 1, 1), (1, 1, 1), 0, self.stream, &mut args).unwrap() };
    }

    pub(crate) fn launch_empty(&self) {
        // SAFETY: `empty` takes no arguments and touches no memory.
        unsafe { result::launch_kernel(self.empty, (1, 1, 1), (1, 1, 1), 0, self.stream, &mut []).unwrap() };
    }
}

/// Device-to-device ceilings at 1 GiB: the copy engine and the copy kernel.
fn d2d(raw: &Raw) {
    raw.bind();
    let bytes = GIB;
    // SAFETY: plain allocations on the bound context; freed below, after every use.
    let (x, y) = unsafe { (result::malloc_sync(bytes).unwrap(), result::malloc_sync(bytes).unwrap()) };
    // SAFETY: `x` and `y` are distinct allocations of `bytes` bytes, alive until freed below.
    let ce = raw.time(|| unsafe { result::memcpy_dtod_async(y, x, bytes, raw.stream).unwrap() });
    row("ceiling_d2d_copy_engine", &gbs(2.0 * bytes as f64, &ce), "GB/s", "cuMemcpyDtoDAsync 1 GiB, read+write");
    let n = (bytes / 16) as u64;
    // Two grids: one thread per UNROLL vectors (as locus launches its elementwise
    // kernels), and one full-occupancy wave with a grid-stride loop. The faster is the ceiling.
    let flat = n.div_ceil(256 * 4) as u32;
    let wave = (raw.sms * (raw.threads_per_sm / 256).max(1)) as u32;
    // SAFETY: `x` and `y` hold `n` float4s each and stay allocated until freed below,
    // after `raw.time` synchronized the last launch.
    let by_grid = |grid| gbs(2.0 * bytes as f64, &raw.time(|| unsafe { raw.copy_kernel(x, y, n, grid) }));
    let (flat_gbs, wave_gbs) = (by_grid(flat), by_grid(wave));
    let (best, other, (g, og)) = if median(&flat_gbs) >= median(&wave_gbs) {
        (&flat_gbs, &wave_gbs, (flat, wave))
    } else {
        (&wave_gbs, &flat_gbs, (wave, flat))
    };
    let note = format!(
        "float4 copy 1 GiB, 4 vectors in flight per thread, read+write; the faster of two grids: {g} x 256 \
         ({og} x 256: {:.1} GB/s)",
        median(other)
    );
    row("ceiling_d2d_copy_kernel", best, "GB/s", &note);
    // SAFETY: `raw.time` synchronized the stream, so no work uses `x` or `y` any more.
    unsafe {
        result::free_sync(x).unwrap();
        result::free_sync(y).unwrap();
    }
}

/// The launch floor, batched exactly as the locus small-op rows: a submit batch of
/// `LAUNCHES` empty launches after a context synchronize, host time until the last
/// launch returns, per launch; and a batch of `LAUNCHES / 10` launches each followed by
/// a context synchronize (`cuCtxSynchronize`, what `locus::synchronize` calls).
pub(crate) fn launch_floor(raw: &Raw) {
    let submit = samples(|| {
        raw.sync_ctx();
        let t = Instant::now();
        for _ in 0..LAUNCHES {
            raw.launch_empty();
        }
        let us = t.elapsed().as_secs_f64() / LAUNCHES as f64 * 1e6;
        raw.sync_ctx();
        us
    });
    row(
        "ceiling_launch_floor",
        &submit,
        "us",
        "empty kernel, raw cuLaunchKernel, per launch in a batch of 20000, no sync",
    );
    let synced = samples(|| {
        raw.sync_ctx();
        let t = Instant::now();
        for _ in 0..LAUNCHES / 10 {
            raw.launch_empty();
            result::ctx::synchronize().unwrap();
        }
        t.elapsed().as_secs_f64() / (LAUNCHES / 10) as f64 * 1e6
    });
    row("ceiling_launch_floor_sync", &synced, "us", "empty kernel + cuCtxSynchronize, per op in a batch of 2000");
}

/// The floor of a traced op (issue 37): each empty launch of the submit batch bracketed
/// by two `cuEventRecord`s of timing events made beforehand, as locus's trace brackets an
/// op, with nothing reading them until the batch is done. `small_add_1k_submit_traced`
/// minus this row, minus `small_add_1k_submit` minus the plain floor, is what the trace's
/// own bookkeeping and its collector cost an op.
pub(crate) fn timed_launch_floor(raw: &Raw) {
    raw.bind();
    let events: Vec<sys::CUevent> =
        (0..2 * LAUNCHES).map(|_| result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT).unwrap()).collect();
    let submit = samples(|| {
        raw.sync_ctx();
        let t = Instant::now();
        for pair in events.chunks_exact(2) {
            // SAFETY: both events were made on this context above and live to the end of
            // this function; the stream lives as long as `raw`.
            unsafe { result::event::record(pair[0], raw.stream).unwrap() };
            raw.launch_empty();
            // SAFETY: as just above.
            unsafe { result::event::record(pair[1], raw.stream).unwrap() };
        }
        let us = t.elapsed().as_secs_f64() / LAUNCHES as f64 * 1e6;
        raw.sync_ctx();
        us
    });
    row(
        "ceiling_launch_floor_timed",
        &submit,
        "us",
        "empty kernel between two cuEventRecord (timing events made beforehand), per launch in a batch of 20000, no sync",
    );
    for e in events {
        // SAFETY: every record completed (the context was synchronized after the last sample).
        unsafe { result::event::destroy(e).unwrap() };
    }
}

/// Pinned copies one way, and both ways at once.
fn pinned(raw: &Raw) {
    raw.bind();
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
        let h2d = raw.time(|| unsafe { result::memcpy_htod_async(dev, &slice[..], raw.stream).unwrap() });
        // SAFETY: as for the H2D copy above.
        let d2h = raw.time(|| unsafe { result::memcpy_dtoh_async(&mut slice[..], dev, raw.stream).unwrap() });
        let mb = size / MIB;
        row(&format!("ceiling_h2d_pinned_{mb}MiB"), &gbs(size as f64, &h2d), "GB/s", "raw cuMemcpyHtoDAsync");
        row(&format!("ceiling_d2h_pinned_{mb}MiB"), &gbs(size as f64, &d2h), "GB/s", "raw cuMemcpyDtoHAsync");
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
    let both = samples(|| {
        let t = Instant::now();
        // SAFETY: each buffer holds `size` bytes; both streams are synchronized before the
        // sample ends, so no copy outlives it.
        unsafe {
            result::memcpy_htod_async(d_in, src, raw.stream).unwrap();
            result::memcpy_dtoh_async(&mut dst[..], d_out, other).unwrap();
            result::stream::synchronize(raw.stream).unwrap();
            result::stream::synchronize(other).unwrap();
        }
        t.elapsed().as_secs_f64()
    });
    row(
        "ceiling_bidirectional_256MiB",
        &gbs(2.0 * size as f64, &both),
        "GB/s",
        "raw H2D and D2H at once on two streams, sum of both, wall time",
    );
    // SAFETY: both streams were synchronized; nothing uses these buffers or `other` now.
    unsafe {
        result::free_sync(d_in).unwrap();
        result::free_sync(d_out).unwrap();
        result::free_host(h_in).unwrap();
        result::free_host(h_out).unwrap();
        result::stream::destroy(other).unwrap();
    }
}

/// The ceilings of the large add and sum rows (issue 35: a copy ceiling does one read per
/// write, so the add, two reads per write, could beat it): the same traffic as each row
/// through raw kernels written like the copy kernel (float4 accesses, 4 in flight per
/// thread, a grid-stride loop), `c = a + b` (2 reads + 1 write) and a read-only sum (each
/// thread sums its float4s, a block sums its threads' in shared memory, one `atomicAdd`
/// of a double per block). Compiled apart from the other raw kernels, so a failure here is
/// an `n/a` row, not a lost run.
const MIX_KERNELS: &str = r#"
#define UNROLL 4
extern "C" __global__ void add4(const float4* __restrict__ a, const float4* __restrict__ b, float4* __restrict__ c, unsigned long long n) {
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x * UNROLL;
    for (unsigned long long base = (unsigned long long)blockIdx.x * blockDim.x * UNROLL + threadIdx.x; base < n; base += step) {
        float4 x[UNROLL], y[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const unsigned long long i = base + (unsigned long long)u * blockDim.x;
            if (i < n) { x[u] = a[i]; y[u] = b[i]; }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const unsigned long long i = base + (unsigned long long)u * blockDim.x;
            if (i < n) c[i] = make_float4(x[u].x + y[u].x, x[u].y + y[u].y, x[u].z + y[u].z, x[u].w + y[u].w);
        }
    }
}
extern "C" __global__ void sum4(const float4* __restrict__ a, unsigned long long n, double* out) {
    __shared__ double part[256];
    const unsigned long long step = (unsigned long long)gridDim.x * blockDim.x * UNROLL;
    float acc = 0.0f;
    for (unsigned long long base = (unsigned long long)blockIdx.x * blockDim.x * UNROLL + threadIdx.x; base < n; base += step) {
        float4 x[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const unsigned long long i = base + (unsigned long long)u * blockDim.x;
            x[u] = i < n ? a[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) acc += (x[u].x + x[u].y) + (x[u].z + x[u].w);
    }
    part[threadIdx.x] = (double)acc;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicAdd(out, part[0]);
}
"#;

/// The large add and sum ceilings at 1 GiB per tensor (the rows' sizes), with the grid
/// locus's elementwise kernels use (a thread per 4 float4s) and a full-occupancy wave;
/// the faster of the two is the ceiling.
fn mix(raw: &Raw) {
    raw.bind();
    let (maj, min) = raw.ctx.compute_capability().unwrap();
    let opts = cudarc::nvrtc::CompileOptions {
        options: vec![format!("--gpu-architecture=compute_{maj}{min}")],
        ..Default::default()
    };
    let module = match cudarc::nvrtc::compile_ptx_with_opts(MIX_KERNELS, opts)
        .map_err(|e| format!("{e:?}"))
        .and_then(|ptx| raw.ctx.load_module(ptx).map_err(|e| format!("{e:?}")))
    {
        Ok(m) => m,
        Err(e) => {
            let note = format!("the raw kernels did not compile: {e}");
            row_na("ceiling_add_1GiB", "GB/s", &note);
            row_na("ceiling_sum_1GiB", "GB/s", &note);
            return;
        }
    };
    let add = module.load_function("add4").unwrap().cu_function();
    let sum = module.load_function("sum4").unwrap().cu_function();
    let bytes = GIB;
    let n = (bytes / 16) as u64;
    // SAFETY: plain allocations on the bound context; freed below, after every use.
    let (a, b, c, out) = unsafe {
        (
            result::malloc_sync(bytes).unwrap(),
            result::malloc_sync(bytes).unwrap(),
            result::malloc_sync(bytes).unwrap(),
            result::malloc_sync(8).unwrap(),
        )
    };
    // SAFETY: `a` and `b` hold `bytes` bytes each (any bits are floats).
    unsafe {
        result::memset_d8_async(a, 0x3f, bytes, raw.stream).unwrap();
        result::memset_d8_async(b, 0x3f, bytes, raw.stream).unwrap();
    }
    let flat = n.div_ceil(256 * 4) as u32;
    let wave = (raw.sms * (raw.threads_per_sm / 256).max(1)) as u32;
    let best = |f: &dyn Fn(u32), traffic: f64| -> (Vec<f64>, u32, u32, f64) {
        let (x, y) = (gbs(traffic, &raw.time(|| f(flat))), gbs(traffic, &raw.time(|| f(wave))));
        if median(&x) >= median(&y) {
            (x, flat, wave, median(&y))
        } else {
            (y, wave, flat, median(&x))
        }
    };
    let launch_add = |grid: u32| {
        let mut args = [
            &a as *const _ as *mut c_void,
            &b as *const _ as *mut c_void,
            &c as *const _ as *mut c_void,
            &n as *const _ as *mut c_void,
        ];
        // SAFETY: `add4(a, b, c, n)`: three pointers and a u64, in order; `a`, `b`, `c`
        // hold `n` float4s each and stay allocated until freed below, after `raw.time`
        // synchronized the last launch; `args` points at locals the launch copies.
        unsafe { result::launch_kernel(add, (grid, 1, 1), (256, 1, 1), 0, raw.stream, &mut args).unwrap() };
    };
    let (v, g, og, other) = best(&launch_add, 3.0 * bytes as f64);
    let note = format!("float4 c = a + b, 1 GiB each, 2 reads + 1 write; the faster of two grids: {g} x 256 ({og} x 256: {other:.1} GB/s)");
    row("ceiling_add_1GiB", &v, "GB/s", &note);
    let launch_sum = |grid: u32| {
        let mut args = [&a as *const _ as *mut c_void, &n as *const _ as *mut c_void, &out as *const _ as *mut c_void];
        // Blocks of 256 threads: the size of `sum4`'s shared array.
        // SAFETY: `sum4(a, n, out)` takes a pointer, a u64 and a pointer, in order; `a` holds `n`
        // float4s and `out` a double, both freed only below, after the last launch completed.
        unsafe { result::launch_kernel(sum, (grid, 1, 1), (256, 1, 1), 0, raw.stream, &mut args).unwrap() };
    };
    let (v, g, og, other) = best(&launch_sum, bytes as f64);
    let note = format!(
        "float4 sum of 1 GiB into a double, 1 read; the faster of two grids: {g} x 256 ({og} x 256: {other:.1} GB/s)"
    );
    row("ceiling_sum_1GiB", &v, "GB/s", &note);
    // SAFETY: `raw.time` synchronized the stream, so no work uses the buffers any more.
    unsafe {
        for p in [a, b, c, out] {
            result::free_sync(p).unwrap();
        }
    }
}

/// Every ceiling row.
pub(crate) fn ceilings(raw: &Raw) {
    d2d(raw);
    mix(raw);
    launch_floor(raw);
    timed_launch_floor(raw);
    pinned(raw);
}
