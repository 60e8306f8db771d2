//! The cuda backend: cudarc 0.19 driver calls, NVRTC-compiled kernels from
//! `locus-kernels`, cuBLAS for float matmul. Loaded dynamically: a machine without
//! CUDA builds and runs locus on the host backend instead.
//!
//! This file opens the backend, holds what every op shares (device lookup, the current
//! stream, output allocation, the write marks) and implements [`Backend`] by delegating:
//! `device` (context, kernel cache, launches), `buffer` (device memory), `stream`
//! (streams, events, per-stream caches and cuBLAS handles), `ops` and `more_ops` (compute),
//! `transfer` and `staged` (copies), `peer` and `nccl` (several devices).

mod buffer;
mod device;
mod nccl;
mod peer;
mod staged;
mod stream;

use std::ffi::c_void;
use std::sync::OnceLock;

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

/// The device memory of `b`; host memory here is a caller's bug, reported, not a panic.
fn cuda(b: &Buffer) -> Result<&CudaBuffer> {
    match b {
        Buffer::Cuda(c) => Ok(c),
        Buffer::Host(_) => Err(super::wrong_buffer("cuda", "host")),
    }
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
            cuda(b)?.use_on(&s)?;
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
            // SAFETY: `f` is `{op}_{dtype}` of this device; `a` matches its parameters and names `out` (`len` elements,
            // allocated on `s`) and buffers of `inputs` (made ready on `s` and kept alive past the kernel by `alloc`):
            // the caller's contract. The kernels bound every access by their count, whatever the grid.
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
            RawStream::Host(_) => Err(foreign("stream")),
        }
    }

    fn raw_event<'e>(&self, ev: &'e RawEvent) -> Result<&'e EventObj> {
        match ev {
            RawEvent::Cuda(e) => Ok(e),
            RawEvent::Host(_) => Err(foreign("event")),
        }
    }
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
mod ops;
mod transfer;

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
        cuda(buf)?.device().bind()?;
        cuda(buf)?.use_on(&s)
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
        self.upload_async_op(device, src, stream)
    }

    fn download_async(
        &self,
        device: DeviceId,
        src: &Buffer,
        dst: &mut HostBuffer,
        stream: &RawStream,
    ) -> Result<RawEvent> {
        self.download_async_op(device, src, dst, stream)
    }

    fn upload(&self, device: DeviceId, data: &[u8]) -> Result<Buffer> {
        self.upload_op(device, data)
    }

    fn download(&self, _device: DeviceId, buf: &Buffer, out: &mut [u8]) -> Result<()> {
        self.download_op(_device, buf, out)
    }

    fn copy(&self, _src: DeviceId, buf: &Buffer, dst: DeviceId) -> Result<Buffer> {
        self.copy_op(_src, buf, dst)
    }

    fn fill(&self, device: DeviceId, dtype: DType, len: usize, value: Scalar) -> Result<Buffer> {
        self.fill_op(device, dtype, len, value)
    }

    fn arange(&self, device: DeviceId, dtype: DType, len: usize, start: f64, step: f64) -> Result<Buffer> {
        self.arange_op(device, dtype, len, start, step)
    }

    fn rand(&self, device: DeviceId, dtype: DType, len: usize, seed: u64) -> Result<Buffer> {
        self.rand_op(device, dtype, len, seed)
    }

    fn unary(&self, device: DeviceId, op: UnaryOp, dtype: DType, x: &Buffer, len: usize) -> Result<Buffer> {
        self.unary_op(device, op, dtype, x, len)
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
        self.binary_op(device, op, dtype, lhs, rhs, out_shape, layout)
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
        self.binary_scalar_op(device, op, dtype, lhs, len, rhs)
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
        self.reduce_op(device, op, dtype, x, r)
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
        self.matmul_op(device, dtype, a, b, m, k, n)
    }

    fn transpose(&self, device: DeviceId, dtype: DType, x: &Buffer, rows: usize, cols: usize) -> Result<Buffer> {
        self.transpose_op(device, dtype, x, rows, cols)
    }

    fn concat(&self, device: DeviceId, dtype: DType, parts: &[(&Buffer, usize)]) -> Result<Buffer> {
        self.concat_op(device, dtype, parts)
    }

    fn slice(&self, device: DeviceId, dtype: DType, x: &Buffer, offset: usize, len: usize) -> Result<Buffer> {
        self.slice_op(device, dtype, x, offset, len)
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
