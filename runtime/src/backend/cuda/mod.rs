//! The cuda backend: cudarc 0.19 driver calls, NVRTC-compiled kernels from
//! `locus-kernels`, cuBLAS for float matmul. Loaded dynamically: a machine without
//! CUDA builds and runs locus on the host backend instead.

mod buffer;
mod device;
mod nccl;
mod peer;
mod staged;
mod stream;

use std::ffi::c_void;
use std::sync::OnceLock;

use cudarc::cublas::sys::cublasOperation_t;
use cudarc::driver::{result, sys};
use locus_kernels::Source;

use std::sync::Arc;

pub(crate) use buffer::CudaBuffer;
use device::{driver, DeviceState};
pub(crate) use stream::{EventObj, StreamObj};

use super::{
    Backend, BinaryOp, Blocks, Buffer, Collective, HostBuffer, ParamOp, RawEvent, RawStream, ReduceOp, UnaryOp,
};
use crate::device::DeviceId;
use crate::element::{DType, Scalar};
use crate::error::{Error, Result};
use crate::shape::{Layout, Reduction};

/// Pointers to the kernel arguments, in order (each must be a named local).
macro_rules! args {
    ($($a:expr),* $(,)?) => { [$(&$a as *const _ as *mut c_void),*] };
}

pub(crate) struct CudaBackend {
    devices: Vec<OnceLock<Result<&'static DeviceState>>>,
}

/// The cuda backend, if this machine can run it; else why not, as a sentence.
pub(crate) fn open() -> std::result::Result<CudaBackend, String> {
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
    Ok(CudaBackend { devices: (0..count).map(|_| OnceLock::new()).collect() })
}

/// Vectors per thread in the elementwise kernels (`UNROLL` in elementwise.cu).
const UNROLL: u64 = 4;

fn cuda(b: &Buffer) -> &CudaBuffer {
    match b {
        Buffer::Cuda(c) => c,
        Buffer::Host(_) => unreachable!("the cuda backend was handed host memory"),
    }
}

/// Up to 8 dims of a broadcast, with per-operand strides; matches `Bcast` in
/// elementwise.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct Bcast {
    rank: i32,
    shape: [u64; 8],
    lhs: [u64; 8],
    rhs: [u64; 8],
}

/// Merges neighbouring dims that both operands walk contiguously, then packs them.
fn bcast(op: &'static str, shape: &[usize], lhs: &[usize], rhs: &[usize]) -> Result<Bcast> {
    let mut dims: Vec<(u64, u64, u64)> = Vec::new();
    for i in 0..shape.len() {
        let (n, l, r) = (shape[i] as u64, lhs[i] as u64, rhs[i] as u64);
        if n == 1 {
            continue;
        }
        match dims.last_mut() {
            Some(last) if last.1 == l * n && last.2 == r * n => *last = (last.0 * n, l, r),
            _ => dims.push((n, l, r)),
        }
    }
    if dims.len() > 8 {
        return Err(Error::InvalidArgument {
            op,
            reason: format!("broadcasting over {} non-mergeable dims; the cuda backend takes at most 8", dims.len()),
        });
    }
    let mut b = Bcast { rank: dims.len() as i32, shape: [1; 8], lhs: [0; 8], rhs: [0; 8] };
    for (i, (n, l, r)) in dims.into_iter().enumerate() {
        (b.shape[i], b.lhs[i], b.rhs[i]) = (n, l, r);
    }
    Ok(b)
}

fn blas_err(device: DeviceId, call: &str, e: impl std::fmt::Debug) -> Error {
    Error::Kernel { device, name: call.into(), message: format!("{e:?}") }
}

impl CudaBackend {
    fn dev(&self, id: DeviceId) -> Result<&'static DeviceState> {
        let ordinal = id.ordinal().unwrap_or(u32::MAX);
        let count = self.devices.len();
        let slot = self.devices.get(ordinal as usize).ok_or(Error::NoSuchDevice { ordinal, count })?;
        slot.get_or_init(|| DeviceState::open(ordinal).map(|d| &*Box::leak(Box::new(d)))).clone()
    }

    /// The stream ops on `dev` use on this thread: the one `on_stream` made current, else
    /// the device's default stream.
    fn stream(&self, dev: &'static DeviceState) -> Arc<StreamObj> {
        match super::current_stream::current(dev.id()) {
            Some(RawStream::Cuda(s)) => s,
            _ => Arc::clone(&dev.stream),
        }
    }

    /// The device, its current stream, and `len` new elements on it; `inputs` are made
    /// ready to be read on that stream.
    ///
    /// This is what the unsafe blocks of the ops rely on: work queued on the returned
    /// stream may read `inputs` and write the output, and all that memory stays allocated
    /// until that work is done. The output is allocated on the stream (stream-ordered);
    /// each input has waited for its writer and recorded the stream as a reader
    /// (`CudaBuffer::use_on`), so its free, or its return to its stream's cache, first waits
    /// for everything queued on this stream until then.
    fn alloc(
        &self,
        id: DeviceId,
        dtype: DType,
        len: usize,
        inputs: &[&Buffer],
    ) -> Result<(&'static DeviceState, Arc<StreamObj>, CudaBuffer)> {
        let dev = self.dev(id)?;
        let s = self.stream(dev);
        for b in inputs {
            cuda(b).use_on(&s)?;
        }
        let bytes =
            len.checked_mul(dtype.size()).ok_or(Error::OutOfMemory { device: id, requested: usize::MAX, free: 0 })?;
        let out = CudaBuffer::alloc(dev, &s, bytes)?;
        Ok((dev, s, out))
    }

    /// A new `len`-element buffer written by one 1-d launch of kernel `name` over `work`
    /// items.
    ///
    /// # Safety
    /// `args`, given the output's device address, returns the argument pointers of kernel
    /// `{op}_{dtype}` of `source` as [`DeviceState::launch`] requires them: one per kernel
    /// parameter, in order, each at a live value of that parameter's type that outlives
    /// the call (the closure's captures do). Every device address among them other than the
    /// output is a buffer of `inputs` holding what the kernel reads for `len` elements of
    /// `dtype`. The output holds `len` elements of `dtype`.
    unsafe fn produce(
        &self,
        id: DeviceId,
        dtype: DType,
        len: usize,
        (source, op, work): (Source, &'static str, u64),
        inputs: &[&Buffer],
        args: impl FnOnce(&u64) -> Vec<*mut c_void>,
    ) -> Result<Buffer> {
        let (dev, s, out) = self.alloc(id, dtype, len, inputs)?;
        if len > 0 {
            let f = dev.kernel(source, op, "", dtype)?;
            // The argument pointers point at this local, which outlives the launch.
            let ptr = out.ptr();
            let mut a = args(&ptr);
            // SAFETY: `f` is `{op}_{dtype}` of this device; `a` matches its parameters and
            // names `out` (`len` elements, allocated on `s`) and buffers of `inputs` (made
            // ready on `s` and kept alive past the kernel by `alloc`): the caller's
            // contract. The kernels bound every access by their count, whatever the grid.
            unsafe { dev.launch(f, (dev.grid_full(work, 256), 1, 1), (256, 1, 1), s.raw.0, &mut a)? };
        }
        self.done(out)
    }

    /// Runs `launch` with an error flag for integer division, and reports a zero divisor.
    fn with_div_check(&self, s: &StreamObj, check: bool, launch: impl FnOnce(u64) -> Result<()>) -> Result<()> {
        if !check {
            return launch(0);
        }
        let dev = self.dev(DeviceId::Cuda(s.ordinal))?;
        let flag = CudaBuffer::alloc(dev, &self.stream(dev), 4)?;
        let d = |call| driver(s.ordinal, call);
        // SAFETY: `flag` is a live 4-byte allocation of this device (held to the end of
        // this function, and its free is ordered on its stream after `s` via the sync
        // below); `s` is a live stream of the device, whose context `alloc` made current.
        unsafe { result::memset_d8_async(flag.ptr(), 0, 4, s.raw.0) }.map_err(d("cuMemsetD8Async"))?;
        launch(flag.ptr())?;
        let mut hit = [0i32];
        // SAFETY: 4 bytes from `flag` (4 bytes, zeroed above and written only by the
        // launch, both on `s`) into `hit`, one `i32` that lives on this frame until the
        // `synchronize` below has waited for the copy.
        unsafe { result::memcpy_dtoh_async(&mut hit, flag.ptr(), s.raw.0) }.map_err(d("cuMemcpyDtoHAsync"))?;
        s.synchronize()?;
        if hit[0] != 0 {
            return Err(Error::InvalidArgument { op: "div", reason: "integer division by zero".into() });
        }
        Ok(())
    }

    /// Copies `bytes` bytes from device address `src` to `dst`, queued on `s`.
    ///
    /// # Safety
    /// `src .. src + bytes` and `dst .. dst + bytes` lie within live allocations of `s`'s
    /// device (or of a peer it may access) that do not overlap and stay allocated until
    /// the copy is done on `s`; `src` was written before this point of `s`'s order, and no
    /// other stream uses `dst` until ordered after the copy.
    unsafe fn dtod(s: &StreamObj, dst: u64, src: u64, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        // SAFETY: both ranges are valid, ordered and alive on `s`, by the caller's contract.
        unsafe { result::memcpy_dtod_async(dst, src, bytes, s.raw.0) }.map_err(driver(s.ordinal, "cuMemcpyDtoDAsync"))
    }

    /// The buffer an op produced. Written on a stream other than the device's default,
    /// it gets an event marking the write, so that readers on other streams wait for
    /// this write alone; on the default stream (single-stream programs) no event.
    fn done(&self, out: CudaBuffer) -> Result<Buffer> {
        let dev = out.device();
        out.mark_written();
        if out.bytes() > 0 && !Arc::ptr_eq(out.stream(), &dev.stream) {
            let written = Arc::new(EventObj::create(dev.ordinal, dev.ctx.cu_ctx(), false)?);
            written.record(out.stream())?;
            out.set_ready(written);
        }
        Ok(Buffer::Cuda(out))
    }

    fn raw_stream(&self, stream: &RawStream) -> Result<Arc<StreamObj>> {
        match stream {
            RawStream::Cuda(s) => Ok(Arc::clone(s)),
            RawStream::Host { .. } => Err(foreign("stream")),
        }
    }

    fn raw_event<'e>(&self, ev: &'e RawEvent) -> Result<&'e EventObj> {
        match ev {
            RawEvent::Cuda(e) => Ok(e),
            RawEvent::Host(_) => Err(foreign("event")),
        }
    }
}

/// Records `done` on `s` right after a copy that uses host memory was queued. If the
/// record fails the copy's end is unknown: wait for the stream instead, and if even that
/// fails call `retire`, which keeps the host memory from the host and from reuse for good.
fn marked(s: &StreamObj, done: &EventObj, retire: impl FnOnce()) -> Result<()> {
    let Err(e) = done.record(s) else { return Ok(()) };
    if s.synchronize().is_err() {
        retire();
    }
    Err(e)
}

fn foreign_stream(device: DeviceId, stream_ordinal: u32) -> Error {
    Error::DeviceMismatch { op: "copy_async", lhs: device, rhs: DeviceId::Cuda(stream_ordinal) }
}

fn foreign(what: &str) -> Error {
    Error::InvalidArgument { op: "stream", reason: format!("a host-backend {what} was handed to the cuda backend") }
}

macro_rules! with_scalar {
    ($s:expr, $v:ident => $body:expr) => {
        match $s {
            Scalar::F32($v) => $body,
            Scalar::F64($v) => $body,
            Scalar::I32($v) => $body,
            Scalar::U8($v) => $body,
        }
    };
}

// After the macros, which it uses.
mod more_ops;

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn device_count(&self) -> usize {
        self.devices.len()
    }

    fn memory(&self, device: DeviceId) -> Result<(usize, usize)> {
        let a = &self.dev(device)?.account;
        Ok((a.allocated(), a.peak()))
    }

    fn reset_peak(&self, device: DeviceId) -> Result<()> {
        self.dev(device)?.account.reset_peak();
        Ok(())
    }

    fn cached_bytes(&self, device: DeviceId) -> Result<usize> {
        Ok(stream::cached_bytes(self.dev(device)?.ordinal))
    }

    fn live_streams(&self) -> usize {
        stream::live_streams()
    }

    fn make_current(&self, device: DeviceId) -> Result<()> {
        self.dev(device)?.bind()
    }

    fn default_stream(&self, device: DeviceId) -> Result<RawStream> {
        Ok(RawStream::Cuda(Arc::clone(&self.dev(device)?.stream)))
    }

    fn new_stream(&self, device: DeviceId) -> Result<RawStream> {
        let dev = self.dev(device)?;
        dev.bind()?;
        Ok(RawStream::Cuda(Arc::new(StreamObj::create(dev.ordinal, dev.ctx.cu_ctx())?)))
    }

    fn sync_stream(&self, stream: &RawStream) -> Result<()> {
        let s = self.raw_stream(stream)?;
        self.dev(DeviceId::Cuda(s.ordinal))?.bind()?;
        s.synchronize()
    }

    fn sync_device(&self, device: DeviceId) -> Result<()> {
        let dev = self.dev(device)?;
        dev.bind()?;
        result::ctx::synchronize().map_err(driver(dev.ordinal, "cuCtxSynchronize"))
    }

    fn new_event(&self, device: DeviceId, timing: bool) -> Result<RawEvent> {
        let dev = self.dev(device)?;
        Ok(RawEvent::Cuda(Arc::new(EventObj::create(dev.ordinal, dev.ctx.cu_ctx(), timing)?)))
    }

    fn record_event(&self, event: &RawEvent, stream: &RawStream) -> Result<()> {
        let (e, s) = (self.raw_event(event)?, self.raw_stream(stream)?);
        self.dev(DeviceId::Cuda(s.ordinal))?.bind()?;
        e.record(&s)
    }

    fn wait_event(&self, stream: &RawStream, event: &RawEvent) -> Result<()> {
        let (e, s) = (self.raw_event(event)?, self.raw_stream(stream)?);
        self.dev(DeviceId::Cuda(s.ordinal))?.bind()?;
        s.wait(e)
    }

    fn sync_event(&self, event: &RawEvent) -> Result<()> {
        let e = self.raw_event(event)?;
        self.dev(DeviceId::Cuda(e.ordinal))?.bind()?;
        e.synchronize()
    }

    fn event_done(&self, event: &RawEvent) -> Result<bool> {
        let e = self.raw_event(event)?;
        self.dev(DeviceId::Cuda(e.ordinal))?.bind()?;
        e.is_complete()
    }

    fn elapsed_ms(&self, start: &RawEvent, end: &RawEvent) -> Result<f32> {
        let (a, b) = (self.raw_event(start)?, self.raw_event(end)?);
        self.dev(DeviceId::Cuda(a.ordinal))?.bind()?;
        a.elapsed_ms(b)
    }

    fn use_on(&self, buf: &Buffer, stream: &RawStream) -> Result<()> {
        let s = self.raw_stream(stream)?;
        cuda(buf).device().bind()?;
        cuda(buf).use_on(&s)
    }

    fn alloc_pinned(&self, bytes: usize) -> Result<usize> {
        // Any context will do: portable memory is pinned for all of them.
        let dev = self.dev(DeviceId::Cuda(0))?;
        dev.bind()?;
        // SAFETY: a context is current (bind above); the driver returns a new page-locked
        // block of `bytes` bytes (or an error) and touches nothing of ours. Its contents are
        // uninitialised: the pinned pool zeroes every block before handing it out.
        match unsafe { result::malloc_host(bytes, sys::CU_MEMHOSTALLOC_PORTABLE) } {
            Ok(p) => Ok(p as usize),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                Err(Error::OutOfMemory { device: DeviceId::Pinned, requested: bytes, free: 0 })
            }
            Err(e) => Err(driver(0, "cuMemHostAlloc")(e)),
        }
    }

    unsafe fn free_pinned(&self, ptr: usize, _bytes: usize) {
        if let Ok(dev) = self.dev(DeviceId::Cuda(0)) {
            if dev.bind().is_ok() {
                // SAFETY: by this fn's contract `ptr` came from `alloc_pinned` above, that
                // is from cuMemHostAlloc (non-null), is freed once, and nothing uses it;
                // a context is current (bind above).
                let _ = unsafe { result::free_host(ptr as *mut c_void) };
            }
        }
    }

    fn upload_async(&self, device: DeviceId, src: &HostBuffer, stream: &RawStream) -> Result<(Buffer, RawEvent)> {
        let s = self.raw_stream(stream)?;
        let dev = self.dev(device)?;
        if s.ordinal != dev.ordinal {
            return Err(foreign_stream(device, s.ordinal));
        }
        let out = CudaBuffer::alloc(dev, &s, src.bytes().len())?;
        let done = Arc::new(EventObj::create(dev.ordinal, dev.ctx.cu_ctx(), false)?);
        if !src.bytes().is_empty() {
            // SAFETY: `out` holds `src.bytes().len()` bytes on this device; `src` is
            // page-locked memory that stays allocated and unwritten until `done`
            // completes (held below, or retired if that cannot be known).
            unsafe { result::memcpy_htod_async(out.ptr(), src.bytes(), s.raw.0) }
                .map_err(driver(dev.ordinal, "cuMemcpyHtoDAsync"))?;
        }
        out.mark_written();
        marked(&s, &done, || src.retire())?;
        src.hold_until(RawEvent::Cuda(Arc::clone(&done)));
        out.set_ready(Arc::clone(&done));
        Ok((Buffer::Cuda(out), RawEvent::Cuda(done)))
    }

    fn download_async(
        &self,
        device: DeviceId,
        src: &Buffer,
        dst: &mut HostBuffer,
        stream: &RawStream,
    ) -> Result<RawEvent> {
        let s = self.raw_stream(stream)?;
        let dev = self.dev(device)?;
        if s.ordinal != dev.ordinal {
            return Err(foreign_stream(device, s.ordinal));
        }
        let b = cuda(src);
        b.use_on(&s)?;
        let done = Arc::new(EventObj::create(dev.ordinal, dev.ctx.cu_ctx(), false)?);
        if b.bytes() > 0 {
            if dst.bytes().len() != b.bytes() {
                return Err(Error::InvalidArgument {
                    op: "to_pinned_async",
                    reason: "host buffer of the wrong length".into(),
                });
            }
            // SAFETY: `dst` is a fresh page-locked buffer of the source's length that the
            // caller exposes only after `done` (a `Pending`); it is held from reuse until
            // then, or retired if that cannot be known.
            unsafe { result::memcpy_dtoh_async(dst.bytes_mut(), b.ptr(), s.raw.0) }
                .map_err(driver(dev.ordinal, "cuMemcpyDtoHAsync"))?;
        }
        marked(&s, &done, || dst.retire())?;
        dst.hold_until(RawEvent::Cuda(Arc::clone(&done)));
        Ok(RawEvent::Cuda(done))
    }

    fn upload(&self, device: DeviceId, data: &[u8]) -> Result<Buffer> {
        let (dev, s, out) = self.alloc(device, DType::U8, data.len(), &[])?;
        dev.bind()?;
        // SAFETY: `out` holds exactly `data.len()` bytes of `dev`, allocated on `s` and
        // held until `done`, whose drop frees it on `s` after the copy; `dev`'s context is
        // current (bind above).
        unsafe { staged::upload(dev, &s, out.ptr(), data)? };
        self.done(out)
    }

    fn download(&self, _device: DeviceId, buf: &Buffer, out: &mut [u8]) -> Result<()> {
        let b = cuda(buf);
        let dev = b.device();
        if out.len() != b.bytes() {
            return Err(Error::InvalidArgument { op: "to_vec", reason: "host buffer of the wrong length".into() });
        }
        if out.is_empty() {
            return Ok(());
        }
        let s = self.stream(dev);
        b.use_on(&s)?;
        dev.bind()?;
        // SAFETY: `b` holds exactly `out.len()` bytes of `dev` (checked above), is ready on
        // `s` (use_on above) and borrowed for this call, which returns only once the copy
        // is done; `dev`'s context is current (bind above).
        unsafe { staged::download(dev, &s, b.ptr(), out) }
    }

    fn copy(&self, _src: DeviceId, buf: &Buffer, dst: DeviceId) -> Result<Buffer> {
        let b = cuda(buf);
        let (from, bytes) = (b.device(), b.bytes());
        if std::ptr::eq(from, self.dev(dst)?) {
            let (_, s, out) = self.alloc(dst, DType::U8, bytes, &[buf])?;
            // SAFETY: `out` (new, on `s`) and `b` (ready on `s` and alive past the copy,
            // see `alloc`) both hold `bytes` bytes of this device, in distinct allocations.
            unsafe { Self::dtod(&s, out.ptr(), b.ptr(), bytes)? };
            return self.done(out);
        }
        let (to, s, out) = self.alloc(dst, DType::U8, bytes, &[])?;
        if bytes == 0 {
            return self.done(out);
        }
        // Across devices: the copy waits for the source's writer, and the source's free
        // waits for the copy.
        s.wait_for(b.stream())?;
        to.bind()?;
        // SAFETY: `out` holds `bytes` bytes of `to`, allocated on `s`; `b` holds `bytes`
        // bytes of `from`, and both contexts are the devices' live primary contexts. `s`
        // waited for `b`'s writer above, and `b`'s stream waits for `s` below, so `b`'s
        // free (ordered on its stream) comes after the copy; `out` is freed on `s`.
        unsafe { result::memcpy_peer_async(to.ctx.cu_ctx(), out.ptr(), from.ctx.cu_ctx(), b.ptr(), bytes, s.raw.0) }
            .map_err(driver(to.ordinal, "cuMemcpyPeerAsync"))?;
        b.stream().wait_for(&s)?;
        self.done(out)
    }

    fn fill(&self, device: DeviceId, dtype: DType, len: usize, value: Scalar) -> Result<Buffer> {
        let n = len as u64;
        // SAFETY: `fill_{dtype}(T* out, u64 n, T v)` gets the output address, `n` = `len`
        // (the output's element count) and `v`, whose Rust type is `dtype`'s: the tensor
        // layer passes `T::DTYPE` with `value.to_scalar()` of the same `T`.
        with_scalar!(value, v => unsafe { self.produce(device, dtype, len, (Source::Init, "fill", n), &[], |out| {
            args![*out, n, v].to_vec()
        }) })
    }

    fn arange(&self, device: DeviceId, dtype: DType, len: usize, start: f64, step: f64) -> Result<Buffer> {
        let n = len as u64;
        // SAFETY: `arange_{dtype}(T* out, u64 n, f64 start, f64 step)` gets the output
        // address, `n` = `len` (the output's element count) and two `f64`s.
        unsafe {
            self.produce(device, dtype, len, (Source::Init, "arange", n), &[], |out| {
                args![*out, n, start, step].to_vec()
            })
        }
    }

    fn rand(&self, device: DeviceId, dtype: DType, len: usize, seed: u64) -> Result<Buffer> {
        if !dtype.is_float() {
            return Err(Error::InvalidArgument { op: "rand", reason: format!("{dtype} is not a float type") });
        }
        let n = len as u64;
        // SAFETY: `rand_{f32,f64}(T* out, u64 n, u64 seed)` (float `dtype` checked above)
        // gets the output address, `n` = `len` (the output's element count) and a `u64`.
        unsafe { self.produce(device, dtype, len, (Source::Init, "rand", n), &[], |out| args![*out, n, seed].to_vec()) }
    }

    fn unary(&self, device: DeviceId, op: UnaryOp, dtype: DType, x: &Buffer, len: usize) -> Result<Buffer> {
        let opname = match op {
            UnaryOp::Neg => "neg",
            UnaryOp::Relu => "relu",
            UnaryOp::Exp => "exp",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Abs => "abs",
            UnaryOp::Square => "square",
        };
        if matches!(op, UnaryOp::Exp | UnaryOp::Sqrt) && !dtype.is_float() {
            return Err(Error::InvalidArgument { op: opname, reason: format!("needs a float type, not {dtype}") });
        }
        let (xp, n) = (cuda(x).ptr(), len as u64);
        let work = n.div_ceil(16 / dtype.size() as u64).div_ceil(UNROLL);
        // SAFETY: `{op}_{dtype}(const T* x, T* out, u64 n)` gets `x` (an input, `len`
        // elements of `dtype` by the Backend contract), the output (`len` elements) and
        // `n` = `len`.
        unsafe {
            self.produce(device, dtype, len, (Source::Elementwise, opname, work), &[x], |out| {
                args![xp, *out, n].to_vec()
            })
        }
    }

    fn binary(
        &self,
        device: DeviceId,
        op: BinaryOp,
        dtype: DType,
        lhs: &Buffer,
        rhs: &Buffer,
        out_shape: &[usize],
        layout: &Layout,
    ) -> Result<Buffer> {
        let len: usize = out_shape.iter().product();
        let (dev, s, out) = self.alloc(device, dtype, len, &[lhs, rhs])?;
        if len == 0 {
            return self.done(out);
        }
        let (a, b, o, n) = (cuda(lhs).ptr(), cuda(rhs).ptr(), out.ptr(), len as u64);
        let check = op == BinaryOp::Div && !dtype.is_float();
        let geometry = match layout {
            Layout::Same => None,
            Layout::RhsScalar => Some(bcast(op.name(), &[len], &[1], &[0])?),
            Layout::LhsScalar => Some(bcast(op.name(), &[len], &[0], &[1])?),
            Layout::Strided { lhs, rhs } => Some(bcast(op.name(), out_shape, lhs, rhs)?),
        };
        self.with_div_check(&s, check, |err| match geometry {
            None => {
                let f = dev.kernel(Source::Elementwise, op.name(), "same", dtype)?;
                let grid = dev.grid_full(n.div_ceil(16 / dtype.size() as u64).div_ceil(UNROLL), 256);
                // SAFETY: `{op}_same_{dtype}(const T* a, const T* b, T* out, u64 n, int* err)`:
                // `lhs`, `rhs` and `out` each hold `n` = `len` elements of `dtype` (same
                // layout: equal shapes), ready and kept alive on `s` (see `alloc`); `err`
                // is the 4-byte flag of `with_div_check`, or 0 where no op can divide an
                // integer by zero (the kernels touch `err` only then).
                unsafe { dev.launch(f, (grid, 1, 1), (256, 1, 1), s.raw.0, &mut args![a, b, o, n, err]) }
            }
            Some(bc) => {
                let f = dev.kernel(Source::Elementwise, op.name(), "bcast", dtype)?;
                // SAFETY: `{op}_bcast_{dtype}(const T* a, const T* b, T* out, u64 n, Bcast bc,
                // int* err)`: `out` holds `n` = `len` elements; `bc` is the `#[repr(C)]`
                // mirror of the kernel's `Bcast`, built from the checked broadcast strides,
                // so every index it yields lies within `lhs` and `rhs`, ready and kept alive
                // on `s` (see `alloc`); `err` as in the same-layout case.
                unsafe {
                    dev.launch(f, (dev.grid(n, 256), 1, 1), (256, 1, 1), s.raw.0, &mut args![a, b, o, n, bc, err])
                }
            }
        })?;
        self.done(out)
    }

    fn binary_scalar(
        &self,
        device: DeviceId,
        op: BinaryOp,
        dtype: DType,
        lhs: &Buffer,
        len: usize,
        rhs: Scalar,
    ) -> Result<Buffer> {
        let (dev, stream, out) = self.alloc(device, dtype, len, &[lhs])?;
        if len == 0 {
            return self.done(out);
        }
        let zero_divisor = matches!(rhs, Scalar::I32(0) | Scalar::U8(0));
        if op == BinaryOp::Div && zero_divisor {
            return Err(Error::InvalidArgument { op: "div", reason: "integer division by zero".into() });
        }
        let f = dev.kernel(Source::Elementwise, op.name(), "scalar", dtype)?;
        let (a, o, n, err) = (cuda(lhs).ptr(), out.ptr(), len as u64, 0u64);
        let grid = dev.grid_full(n.div_ceil(16 / dtype.size() as u64).div_ceil(UNROLL), 256);
        // SAFETY: `{op}_scalar_{dtype}(const T* a, T s, T* out, u64 n, int* err)`: `lhs` and
        // `out` hold `n` = `len` elements of `dtype`, ready and kept alive on `stream` (see
        // `alloc`); `v` has `dtype`'s Rust type (the tensor layer passes `T::to_scalar` with
        // `T::DTYPE`); `err` is null, which the kernel never touches since an integer zero
        // divisor was refused above.
        with_scalar!(rhs, v => unsafe {
            dev.launch(f, (grid, 1, 1), (256, 1, 1), stream.raw.0, &mut args![a, v, o, n, err])
        })?;
        self.done(out)
    }

    fn scalar_binary(
        &self,
        device: DeviceId,
        op: BinaryOp,
        dtype: DType,
        lhs: Scalar,
        rhs: &Buffer,
        len: usize,
    ) -> Result<Buffer> {
        more_ops::scalar_binary(self, device, op, dtype, lhs, rhs, len)
    }

    fn unary_param(&self, device: DeviceId, op: ParamOp, dtype: DType, x: &Buffer, len: usize) -> Result<Buffer> {
        more_ops::unary_param(self, device, op, dtype, x, len)
    }

    fn reduce(&self, device: DeviceId, op: ReduceOp, dtype: DType, x: &Buffer, r: Reduction) -> Result<Buffer> {
        let opname = match op {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
        };
        if op == ReduceOp::Mean && !dtype.is_float() {
            return Err(Error::InvalidArgument { op: "mean", reason: format!("needs a float type, not {dtype}") });
        }
        let (dev, stream, out) = self.alloc(device, dtype, r.out_len(), &[x])?;
        if r.out_len() == 0 {
            return self.done(out);
        }
        let k = |variant: &'static str| dev.kernel(Source::Reduce, opname, variant, dtype);
        let (xp, o, s) = (cuda(x).ptr(), out.ptr(), stream.raw.0);
        let (outer, len, inner) = (r.outer as u64, r.len as u64, r.inner as u64);
        // In every launch below `x` holds `outer * len * inner` elements of `dtype` and
        // `out` `outer * inner` (= `r.out_len()`), both ready and kept alive on `stream`
        // (see `alloc`); the kernels bound their accesses by these counts.
        if outer == 1 && inner == 1 {
            if len <= 1 << 16 {
                // SAFETY: `{op}_single_{dtype}(const T* x, u64 n, T* out)`: `len` elements of
                // `x` into the one element of `out`.
                unsafe { dev.launch(k("single")?, (1, 1, 1), (1024, 1, 1), s, &mut args![xp, len, o])? };
            } else {
                // Accumulator width: f64 for float sums and means and for f64 max, else 4 bytes.
                let acc = if op != ReduceOp::Max && dtype.is_float() || dtype == DType::F64 { 8 } else { 4 };
                let blocks = dev.grid(len.div_ceil(16 / dtype.size() as u64), 256);
                let partial = CudaBuffer::alloc(dev, &stream, blocks as usize * acc)?;
                let (p, nparts) = (partial.ptr(), blocks as u64);
                // SAFETY: `{op}_partial_{dtype}(const T* x, u64 n, A* partial)`: one
                // accumulator per block into `partial`, which holds `blocks` accumulators of
                // `acc` bytes (the kernel's `A`: f64 for float sums and means and f64 max,
                // else 4 bytes), allocated on `stream` and freed there after both launches.
                unsafe { dev.launch(k("partial")?, (blocks, 1, 1), (256, 1, 1), s, &mut args![xp, len, p])? };
                // SAFETY: `{op}_final_{dtype}(const A* partial, u64 nparts, T* out, u64 len)`:
                // the `nparts` = `blocks` accumulators written just before on `stream`, into
                // the one element of `out`.
                unsafe { dev.launch(k("final")?, (1, 1, 1), (1024, 1, 1), s, &mut args![p, nparts, o, len])? };
            }
        } else if inner == 1 {
            let grid = outer.min(dev.sm_count as u64 * 16) as u32;
            // SAFETY: `{op}_rows_{dtype}(const T* x, T* out, u64 outer, u64 len)`: `outer`
            // rows of `len` elements of `x`, one result each into `out` (`outer` elements).
            unsafe { dev.launch(k("rows")?, (grid, 1, 1), (256, 1, 1), s, &mut args![xp, o, outer, len])? };
        } else {
            let grid = dev.grid(outer * inner, 256);
            // SAFETY: `{op}_cols_{dtype}(const T* x, T* out, u64 outer, u64 len, u64 inner)`:
            // `x` as `[outer, len, inner]`, reduced over `len` into `out` (`outer * inner`).
            unsafe { dev.launch(k("cols")?, (grid, 1, 1), (256, 1, 1), s, &mut args![xp, o, outer, len, inner])? };
        }
        self.done(out)
    }

    fn matmul(
        &self,
        device: DeviceId,
        dtype: DType,
        a: &Buffer,
        b: &Buffer,
        m: usize,
        k: usize,
        n: usize,
    ) -> Result<Buffer> {
        let (dev, stream, out) = self.alloc(device, dtype, m * n, &[a, b])?;
        if m == 0 || n == 0 {
            return self.done(out);
        }
        let (ap, bp, o, s) = (cuda(a).ptr(), cuda(b).ptr(), out.ptr(), stream.raw.0);
        if k == 0 {
            // SAFETY: `out` holds exactly `m * n` elements of `dtype`, allocated on `s`
            // (`stream`, live for the call) and freed there after this memset.
            unsafe { result::memset_d8_async(o, 0, m * n * dtype.size(), s) }
                .map_err(driver(dev.ordinal, "cuMemsetD8Async"))?;
            return self.done(out);
        }
        let too_big = |what: usize| what > i32::MAX as usize;
        if dtype.is_float() {
            if too_big(m) || too_big(n) || too_big(k) {
                return Err(Error::InvalidArgument {
                    op: "matmul",
                    reason: "dims beyond i32::MAX do not fit cuBLAS".into(),
                });
            }
            // The output may come from the stream's block cache, with no driver call that
            // would have made this device's context current: cuBLAS needs it current.
            dev.bind()?;
            // The stream's own handle, bound to it once: no other thread can move it to
            // another stream between binding and the gemm.
            let h = stream.blas()?;
            let (mi, ni, ki) = (m as i32, n as i32, k as i32);
            // Row-major C = A B is column-major C^T = B^T A^T: swap operands, no transposes.
            let nn = cublasOperation_t::CUBLAS_OP_N;
            // SAFETY: `ap`, `bp` and `o` hold m*k, k*n and m*n elements of `dtype` on this
            // device (allocated by this backend for these shapes), ready and kept alive on
            // `stream` (see `alloc`); `h` is `stream`'s own cuBLAS handle, bound to it, and
            // this device's context is current. The leading dimensions (n, k, n) are those
            // of the row-major operands read as column-major, and all dims fit an `i32`
            // (checked above). `alpha`/`beta` point at temporaries that outlive the call.
            unsafe {
                // The same call for both widths; only the element type differs.
                macro_rules! gemm {
                    ($f:ident, $t:ty, $name:literal) => {
                        cudarc::cublas::result::$f(
                            h,
                            nn,
                            nn,
                            ni,
                            mi,
                            ki,
                            &(1.0 as $t),
                            bp as *const $t,
                            ni,
                            ap as *const $t,
                            ki,
                            &(0.0 as $t),
                            o as *mut $t,
                            ni,
                        )
                        .map_err(|e| blas_err(device, $name, e))?
                    };
                }
                if dtype == DType::F32 {
                    gemm!(sgemm, f32, "cublasSgemm");
                } else {
                    gemm!(dgemm, f64, "cublasDgemm");
                }
            }
        } else {
            let (gx, gy) = (n.div_ceil(16), m.div_ceil(16));
            if gx > i32::MAX as usize || gy > 65535 {
                return Err(Error::InvalidArgument {
                    op: "matmul",
                    reason: format!("[{m}, {k}] x [{k}, {n}] is too large for the integer kernel"),
                });
            }
            let (m, k, n) = (m as u64, k as u64, n as u64);
            let f = dev.kernel(Source::Matrix, "matmul", "", dtype)?;
            // SAFETY: `matmul_{dtype}(const T* a, const T* b, T* out, u64 m, u64 k, u64 n)`:
            // `a`, `b` and `out` hold m*k, k*n and m*n elements of `dtype`, ready and kept
            // alive on `stream` (see `alloc`); the kernel bounds its indices by m, k and n.
            unsafe { dev.launch(f, (gx as u32, gy as u32, 1), (16, 16, 1), s, &mut args![ap, bp, o, m, k, n])? };
        }
        self.done(out)
    }

    fn transpose(&self, device: DeviceId, dtype: DType, x: &Buffer, rows: usize, cols: usize) -> Result<Buffer> {
        let (dev, s, out) = self.alloc(device, dtype, rows * cols, &[x])?;
        if rows == 0 || cols == 0 {
            return self.done(out);
        }
        let (gx, gy) = (cols.div_ceil(32), rows.div_ceil(32));
        if gx > i32::MAX as usize || gy > 65535 {
            return Err(Error::InvalidArgument { op: "transpose", reason: format!("[{rows}, {cols}] is too large") });
        }
        let (xp, o, r, c) = (cuda(x).ptr(), out.ptr(), rows as u64, cols as u64);
        let f = dev.kernel(Source::Matrix, "transpose", "", dtype)?;
        // SAFETY: `transpose_{dtype}(const T* x, T* out, u64 rows, u64 cols)`: `x` and `out`
        // each hold `rows * cols` elements of `dtype`, ready and kept alive on `s` (see
        // `alloc`); the kernel bounds its indices by `rows` and `cols`.
        unsafe { dev.launch(f, (gx as u32, gy as u32, 1), (32, 8, 1), s.raw.0, &mut args![xp, o, r, c])? };
        self.done(out)
    }

    fn concat(&self, device: DeviceId, dtype: DType, parts: &[(&Buffer, usize)]) -> Result<Buffer> {
        let len = parts.iter().map(|p| p.1).sum();
        let inputs: Vec<&Buffer> = parts.iter().map(|p| p.0).collect();
        let (_, s, out) = self.alloc(device, dtype, len, &inputs)?;
        let mut at = out.ptr();
        for (buf, _) in parts {
            let b = cuda(buf);
            // SAFETY: `out` holds the sum of the parts' lengths, so `at .. at + b.bytes()`
            // (the running offset) lies within it; `b` is a distinct input buffer of
            // `b.bytes()` bytes; both ready and kept alive on `s` (see `alloc`).
            unsafe { Self::dtod(&s, at, b.ptr(), b.bytes())? };
            at += b.bytes() as u64;
        }
        self.done(out)
    }

    fn slice(&self, device: DeviceId, dtype: DType, x: &Buffer, offset: usize, len: usize) -> Result<Buffer> {
        let (_, s, out) = self.alloc(device, dtype, len, &[x])?;
        let src = cuda(x).ptr() + (offset * dtype.size()) as u64;
        // SAFETY: the caller checked `offset + len` against `x`'s length (Backend
        // contract), so the source range lies within `x`; `out` holds `len` elements; both
        // are ready and kept alive on `s` (see `alloc`), in distinct allocations.
        unsafe { Self::dtod(&s, out.ptr(), src, len * dtype.size())? };
        self.done(out)
    }

    fn copy_blocks(&self, device: DeviceId, dtype: DType, len: usize, parts: &[Blocks<'_>]) -> Result<Buffer> {
        more_ops::copy_blocks(self, device, dtype, len, parts)
    }

    // Multi-device work: see peer.rs and nccl.rs.

    fn can_access_peer(&self, device: DeviceId, peer: DeviceId) -> Result<bool> {
        peer::can_access_peer(self, device, peer)
    }

    fn enable_peer_access(&self, device: DeviceId, peer: DeviceId) -> Result<()> {
        peer::enable_peer_access(self, device, peer)
    }

    fn collective(
        &self,
        devices: &[DeviceId],
        dtype: DType,
        len: usize,
        op: Collective<'_>,
    ) -> Result<Option<Vec<Buffer>>> {
        nccl::collective(self, devices, dtype, len, op)
    }
}
