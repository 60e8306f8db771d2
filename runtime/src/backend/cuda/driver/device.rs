//! The driver and one CUDA device: probing for the libraries before any driver call,
//! the device's primary context and which context this thread has current, locus'
//! default stream and copy stream on it, the cache of NVRTC-compiled kernels, and the
//! memory account. Also the raw handle wrapper ([`Handle`]) with the reason each handle
//! type may cross threads, and the driver-error conversion every module uses.

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{result, sys, CudaContext, CudaModule, DriverError};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
use locus_kernels::Source;

use crate::backend::fast_map::FastMap;

use crate::backend::account::MemoryAccount;
use crate::backend::api::user_kernel::KernelSource;
use crate::backend::cuda::driver::stream::CudaStream;
use crate::backend::cuda::driver::user_kernel;
use crate::device_id::DeviceId;
use crate::element::DType;
use crate::error::{Error, Result};

thread_local! {
    /// The ordinal whose context locus last made current on this thread.
    static BOUND: Cell<Option<u32>> = const { Cell::new(None) };
    /// The kernels this thread looked up last, by device and [`KernelKey`]: a table with
    /// one entry per slot, so an op run again finds its kernel with no lock. An entry
    /// never goes stale: a device's modules stay loaded for the process (`DeviceState`s
    /// are never dropped), and a key names one kernel.
    static RECENT: [Cell<Option<(u32, KernelKey, sys::CUfunction)>>; RECENT_SLOTS] =
        const { [const { Cell::new(None) }; RECENT_SLOTS] };
}

/// Slots of [`RECENT`]: a power of two.
const RECENT_SLOTS: usize = 16;

/// The slot of [`RECENT`] for `key` on device `ordinal`.
fn recent_slot(ordinal: u32, key: &KernelKey) -> usize {
    let h = (key.0 ^ key.2.rotate_left(17) ^ (key.4 as usize) << 8 ^ ordinal as usize) as u64;
    (h.wrapping_mul(0x517c_c1b7_2722_0a95) >> (64 - RECENT_SLOTS.trailing_zeros())) as usize
}

/// A raw driver or library handle. Only the handle types below may cross threads: a
/// raw pointer of any other kind stays `!Send`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Handle<T>(pub T);
// SAFETY: an executable graph may be launched on any stream of its device from any
// thread; the driver serialises launches of one graph internally.
unsafe impl Send for Handle<sys::CUgraphExec> {}
// SAFETY: as for Send: `&Handle` only lets a launch read the handle.
unsafe impl Sync for Handle<sys::CUgraphExec> {}
// SAFETY: the CUDA driver API is thread-safe: a context handle may be made current on
// any thread (`set_current`), by several threads at once. Primary contexts are retained
// by their `DeviceState`, which lives for the process, so a copy held anywhere stays valid.
unsafe impl Send for Handle<sys::CUcontext> {}
// SAFETY: a context handle is an opaque id that `&Handle` only lets one copy; every use
// is a driver call, which the driver serialises internally.
unsafe impl Sync for Handle<sys::CUcontext> {}
// SAFETY: a stream may be used from any thread with its device's context current (every
// user binds first); it is destroyed only when its owning `CudaStream` drops, after which
// no `Handle` copy of it is used.
unsafe impl Send for Handle<sys::CUstream> {}
// SAFETY: enqueueing on one stream from several threads at once is allowed by the driver
// (each call is atomic; locus orders dependent work itself, see `ordering`).
unsafe impl Sync for Handle<sys::CUstream> {}
// SAFETY: an event may be recorded, waited on, queried and destroyed from any thread with
// its context current; it is destroyed only when its owning `CudaEvent` drops.
unsafe impl Send for Handle<sys::CUevent> {}
// SAFETY: concurrent driver calls on one event are thread-safe; `&Handle` gives only a
// copy of the id.
unsafe impl Sync for Handle<sys::CUevent> {}
// SAFETY: a loaded function may be launched from any thread; it stays valid while its
// module, kept by the device (for the process), lives.
unsafe impl Send for Handle<sys::CUfunction> {}
// SAFETY: concurrent launches of one function are allowed (launch state is per call, not
// per function); locus never changes a function's attributes.
unsafe impl Sync for Handle<sys::CUfunction> {}
// SAFETY: cuBLAS is thread-safe and its functions may be called from several host
// threads, even with the same handle; locus never destroys one (a dropped stream pools
// its handle for the next stream of the device).
unsafe impl Send for Handle<cudarc::cublas::sys::cublasHandle_t> {}
// SAFETY: what cuBLAS does not allow is changing a shared handle's configuration under
// another thread: locus binds a handle to its stream once, before sharing it, and never
// changes its configuration afterwards.
unsafe impl Sync for Handle<cudarc::cublas::sys::cublasHandle_t> {}

/// The number of CUDA devices, once the driver and the libraries locus loads are known to
/// be there; else why this machine cannot run the cuda backend, as a sentence.
pub(crate) fn probe() -> std::result::Result<usize, String> {
    // SAFETY: these only try to load the libraries (libloading, dropped at once) and touch
    // no symbol of them; cudarc resolves symbols only on the first call made through it,
    // which comes after these checks, so a missing library is reported, not a panic.
    unsafe {
        if !sys::is_culib_present() {
            return Err("no CUDA driver found (libcuda.so); install the NVIDIA driver".into());
        }
        if !cudarc::nvrtc::sys::is_culib_present() {
            return Err(
                "the CUDA driver is present but NVRTC (libnvrtc.so) is not; install the CUDA toolkit's NVRTC".into()
            );
        }
        if !cudarc::cublas::sys::is_culib_present() {
            return Err(
                "the CUDA driver is present but cuBLAS (libcublas.so) is not; install the CUDA toolkit's cuBLAS".into(),
            );
        }
    }
    result::init().map_err(|e| format!("cuInit failed: {e:?}"))?;
    let count = result::device::get_count().map_err(|e| format!("cuDeviceGetCount failed: {e:?}"))?;
    if count < 1 {
        return Err("the CUDA driver reports no devices (check CUDA_VISIBLE_DEVICES)".into());
    }
    Ok(count as usize)
}

/// A user kernel loaded on a device, with the module that owns it; or why it is not.
type UserFunction = std::result::Result<(Handle<sys::CUfunction>, Arc<CudaModule>), Error>;

/// A kernel by op, variant and element type, the two names by address and length: a
/// lookup hashes and compares four words, not the names' bytes. One name at two addresses
/// makes two entries for one function (`functions` loads it once).
type KernelKey = (usize, usize, usize, usize, DType);

fn kernel_key(op: &'static str, variant: &'static str, dtype: DType) -> KernelKey {
    (op.as_ptr() as usize, op.len(), variant.as_ptr() as usize, variant.len(), dtype)
}

pub(crate) struct DeviceState {
    pub ordinal: u32,
    pub ctx: Arc<CudaContext>,
    /// The stream locus uses on this device unless another is made current.
    pub stream: Arc<CudaStream>,
    pub sm_count: u32,
    pub arch: (i32, i32),
    pub account: MemoryAccount,
    modules: [OnceLock<std::result::Result<Arc<CudaModule>, Error>>; Source::ALL.len()],
    functions: Mutex<HashMap<String, Handle<sys::CUfunction>>>,
    kernels: Mutex<FastMap<KernelKey, Handle<sys::CUfunction>>>,
    /// User kernels by [`KernelSource::id`], with the module that owns each; a failed
    /// compile or load is kept too, so it is reported again rather than retried.
    user: Mutex<FastMap<usize, UserFunction>>,
    /// Made on first use; a creation that fails is tried again at the next use.
    copy: OnceLock<Arc<CudaStream>>,
    graphs: OnceLock<Arc<CudaStream>>,
}

impl std::fmt::Debug for DeviceState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cuda:{} (sm_{}{})", self.ordinal, self.arch.0, self.arch.1)
    }
}

/// Codes the failures the fault plan makes return: out of memory (allocations, streams),
/// out of resources (launches), and any other error (copies, records, waits).
pub(crate) const OOM: sys::CUresult = sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY;
pub(crate) const LAUNCH: sys::CUresult = sys::CUresult::CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
pub(crate) const UNKNOWN: sys::CUresult = sys::CUresult::CUDA_ERROR_UNKNOWN;

/// The error a driver call made to fail by the fault plan returns (`crate::faults::gate`).
pub(crate) fn failure(code: sys::CUresult) -> impl FnOnce() -> DriverError {
    move || DriverError(code)
}

/// A copy's driver call, unless the fault plan fails it (its `copy` point).
pub(crate) fn dma<T>(
    call: impl FnOnce() -> std::result::Result<T, DriverError>,
) -> std::result::Result<T, DriverError> {
    crate::faults::gate(crate::faults::Point::Copy, failure(UNKNOWN), call)
}

/// A driver error as a locus error naming the device and the call.
pub(crate) fn driver(device: u32, call: &'static str) -> impl FnOnce(DriverError) -> Error {
    move |e| {
        let code = e.error_name().map(|c| c.to_string_lossy().into_owned()).unwrap_or_else(|_| format!("{:?}", e.0));
        Error::Driver { device: DeviceId::Cuda(device), call, code: crate::faults::noted(code) }
    }
}

impl DeviceState {
    pub(crate) fn open(ordinal: u32) -> Result<Self> {
        let d = |call| driver(ordinal, call);
        let ctx = CudaContext::new(ordinal as usize).map_err(d("cuDevicePrimaryCtxRetain"))?;
        BOUND.with(|b| b.set(Some(ordinal)));
        let stream = Arc::new(CudaStream::create(ordinal, ctx.cu_ctx())?);
        stream.set_default();
        let sm_count = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(d("cuDeviceGetAttribute"))? as u32;
        let arch = ctx.compute_capability().map_err(d("cuDeviceGetAttribute"))?;
        keep_pool_memory(&ctx, ordinal)?;
        Ok(DeviceState {
            ordinal,
            ctx,
            stream,
            sm_count,
            arch,
            account: MemoryAccount::new(DeviceId::Cuda(ordinal), usize::MAX),
            modules: Default::default(),
            functions: Mutex::new(HashMap::new()),
            kernels: Mutex::new(FastMap::default()),
            user: Mutex::new(FastMap::default()),
            copy: OnceLock::new(),
            graphs: OnceLock::new(),
        })
    }

    pub(crate) fn id(&self) -> DeviceId {
        DeviceId::Cuda(self.ordinal)
    }

    /// Makes this device's context current on the calling thread; no driver call when
    /// locus already made it current here.
    pub(crate) fn bind(&self) -> Result<()> {
        set_current(self.ordinal, self.ctx.cu_ctx())
    }

    /// Makes this device's context current with a driver call, whatever locus' record
    /// says: after a library (NCCL) that may have switched contexts inside its calls.
    pub(crate) fn bind_again(&self) -> Result<()> {
        BOUND.with(|b| b.set(None));
        self.bind()
    }

    fn module(&self, source: Source) -> Result<&Arc<CudaModule>> {
        let m = self.modules[source.index()].get_or_init(|| {
            let opts = CompileOptions {
                options: vec![
                    format!("--gpu-architecture=compute_{}{}", self.arch.0, self.arch.1),
                    "-std=c++17".into(),
                ],
                name: Some(source.file().into()),
                ..Default::default()
            };
            let kernel_err = |message: String| Error::Kernel { device: self.id(), name: source.file().into(), message };
            let ptx = compile_ptx_with_opts(source.program(), opts).map_err(|e| kernel_err(format!("NVRTC: {e:?}")))?;
            let m = self.ctx.load_module(ptx).map_err(|e| kernel_err(format!("cuModuleLoadData: {e:?}")));
            // cudarc may have changed the current context.
            BOUND.with(|b| b.set(None));
            m
        });
        m.as_ref().map_err(Clone::clone)
    }

    /// The kernel `{op}_{variant}_{dtype}` (or `{op}_{dtype}` when `variant` is empty)
    /// from `source`, compiled and loaded on first use; later calls are a map lookup.
    pub(crate) fn kernel(
        &self,
        source: Source,
        op: &'static str,
        variant: &'static str,
        dtype: DType,
    ) -> Result<sys::CUfunction> {
        let key = kernel_key(op, variant, dtype);
        let slot = recent_slot(self.ordinal, &key);
        let recent = RECENT.try_with(|r| r[slot].get()).ok().flatten();
        if let Some((ordinal, k, f)) = recent {
            if ordinal == self.ordinal && k == key {
                return Ok(f);
            }
        }
        let found = self.kernels.lock().map_err(|_| poisoned(self.id()))?.get(&key).map(|f| f.0);
        let f = match found {
            Some(f) => f,
            None => {
                let name = if variant.is_empty() { format!("{op}_{dtype}") } else { format!("{op}_{variant}_{dtype}") };
                let f = self.function(source, &name)?;
                self.kernels.lock().map_err(|_| poisoned(self.id()))?.insert(key, Handle(f));
                f
            }
        };
        let _ = RECENT.try_with(|r| r[slot].set(Some((self.ordinal, key, f))));
        Ok(f)
    }

    /// The kernel `name` from `source`, compiled and loaded on first use.
    pub(crate) fn function(&self, source: Source, name: &str) -> Result<sys::CUfunction> {
        if let Some(f) = self.functions.lock().map_err(|_| poisoned(self.id()))?.get(name) {
            return Ok(f.0);
        }
        let module = self.module(source)?;
        let f = module.load_function(name).map_err(|e| Error::Kernel {
            device: self.id(),
            name: name.into(),
            message: format!("{e:?}"),
        })?;
        let raw = f.cu_function();
        // The module (kept in self.modules) owns the function; the handle stays valid.
        self.functions.lock().map_err(|_| poisoned(self.id()))?.insert(name.to_string(), Handle(raw));
        Ok(raw)
    }

    /// The user kernel `k`, compiled for this device's architecture (once per process
    /// and architecture) and loaded on first use; later calls are a map lookup. The map
    /// stays locked while a kernel loads, so no two threads load one kernel twice (a
    /// second module replacing the first would unload code a launch may be running).
    pub(crate) fn user_function(&self, k: &'static KernelSource) -> Result<sys::CUfunction> {
        let mut user = self.user.lock().map_err(|_| poisoned(self.id()))?;
        let entry = user.entry(k.id()).or_insert_with(|| {
            let ptx = user_kernel::ptx(k, self.arch).map_err(|message| self.user_error(k, message))?;
            let m = self.ctx.load_module(ptx).map_err(|e| self.user_error(k, format!("cuModuleLoadData: {e:?}")));
            // cudarc may have changed the current context.
            BOUND.with(|b| b.set(None));
            let m = m?;
            // `load_function` panics on a NUL in the name: `ptx` checked there is none.
            let f = m.load_function(k.name).map_err(|e| {
                self.user_error(k, format!("no `extern \"C\" __global__` function of that name ({e:?})"))
            })?;
            // The module, kept next to it for the process, owns the function.
            Ok((Handle(f.cu_function()), m))
        });
        entry.as_ref().map(|(f, _)| f.0).map_err(Clone::clone)
    }

    fn user_error(&self, k: &KernelSource, message: String) -> Error {
        Error::Kernel { device: self.id(), name: k.name.to_string(), message }
    }

    /// The side stream for staged host copies, created on first use.
    /// The stream graphs' memory is allocated and freed on (made on first use, never
    /// captured: no user can reach it), so that blocks freed by one graph are reused by
    /// the next without a driver allocation.
    pub(crate) fn graph_stream(&self) -> Result<&Arc<CudaStream>> {
        self.side_stream(&self.graphs)
    }

    pub(crate) fn copy_stream(&self) -> Result<&Arc<CudaStream>> {
        self.side_stream(&self.copy)
    }

    /// The stream in `cell`, made now if it is not yet. A creation that fails is an error
    /// of this call only (the next one tries again); of two threads that make one at once,
    /// the first to finish sets it and the other's is destroyed.
    fn side_stream<'a>(&self, cell: &'a OnceLock<Arc<CudaStream>>) -> Result<&'a Arc<CudaStream>> {
        if let Some(s) = cell.get() {
            return Ok(s);
        }
        self.bind()?;
        let made = Arc::new(CudaStream::create(self.ordinal, self.ctx.cu_ctx())?);
        Ok(cell.get_or_init(|| made))
    }
}

/// Makes `ctx` (of device `ordinal`) current on the calling thread, with no driver call
/// when locus already made it current here.
pub(crate) fn set_current(ordinal: u32, ctx: sys::CUcontext) -> Result<()> {
    if BOUND.with(|b| b.get()) == Some(ordinal) {
        return Ok(());
    }
    // Every caller passes the primary context of a device (`ctx.cu_ctx()` of a `DeviceState`, or the copy a stream or
    // event of it keeps), retained by that device's `CudaContext`.
    // SAFETY: devices are leaked for the process (`CudaBackend::dev`), and in `DeviceState::open` the context outlives
    // the stream made there, so it is initialised and not yet released.
    unsafe { result::ctx::set_current(ctx) }.map_err(driver(ordinal, "cuCtxSetCurrent"))?;
    BOUND.with(|b| b.set(Some(ordinal)));
    Ok(())
}

fn poisoned(device: DeviceId) -> Error {
    Error::Kernel { device, name: "kernel table".into(), message: "a thread panicked while loading a kernel".into() }
}

/// Keeps freed stream-ordered memory in the device's pool instead of returning it to
/// the driver at every synchronisation, so that allocation is a cheap pool hit.
fn keep_pool_memory(ctx: &CudaContext, ordinal: u32) -> Result<()> {
    if !ctx.has_async_alloc() {
        return Ok(());
    }
    // SAFETY: `ctx.cu_device()` is a device handle the driver returned for this ordinal (cuDeviceGet in
    // `CudaContext::new`), and its default pool lives as long as the device. CU_MEMPOOL_ATTR_RELEASE_THRESHOLD takes a
    // `cuuint64_t`: `threshold` is a live `u64` on this stack frame, which the driver reads during the call only.
    unsafe {
        let pool = result::device::get_default_mem_pool(ctx.cu_device())
            .map_err(driver(ordinal, "cuDeviceGetDefaultMemPool"))?;
        let mut threshold: u64 = u64::MAX;
        result::mem_pool::set_attribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            &mut threshold as *mut u64 as *mut c_void,
        )
        .map_err(driver(ordinal, "cuMemPoolSetAttribute"))?;
    }
    Ok(())
}
