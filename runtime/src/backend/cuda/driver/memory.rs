//! How an op gets and hands back memory. An op runs on the thread's current stream of its
//! device; [`alloc`] allocates its output there and makes its inputs ready to be read
//! there, which is the ordering every unsafe block of the ops relies on, and [`done`]
//! marks the output written so that readers on other streams wait
//! for exactly that write. Device-to-device copies within one device and the page-locked
//! blocks behind the pinned pool live here too; the buffer type itself (caching bins,
//! readers, stream-ordered free) is in `buffer`.

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{result, sys};

use crate::backend::blocks;
use crate::backend::cuda::driver::buffer::CudaBuffer;
use crate::backend::cuda::driver::device::{dma, driver, failure, DeviceState, OOM};
use crate::backend::cuda::driver::event::CudaEvent;
use crate::backend::cuda::driver::stream::CudaStream;
use crate::backend::cuda::driver::timing;
use crate::backend::cuda::CudaBackend;
use crate::backend::sync::current_stream::{self as current_streams, Current};
use crate::device_id::DeviceId;
use crate::element::DType;
use crate::error::Result;
use crate::faults::{gate, Point};

thread_local! {
    /// The driver streams `on_stream` made current on this thread.
    static CURRENT: Current<Arc<CudaStream>> = const { Current::new() };
}

/// The stream `on_stream` made current for `device` on this thread, if any.
pub(crate) fn current_of(device: DeviceId) -> Option<Arc<CudaStream>> {
    CURRENT.with(|c| c.of(device))
}

/// Runs `f` with `stream` current for `device` on this thread.
pub(crate) fn with_current<R>(device: DeviceId, stream: Arc<CudaStream>, f: impl FnOnce() -> R) -> R {
    current_streams::with_current(&CURRENT, device, stream, f)
}

/// The stream ops on `dev` use on this thread: the one `on_stream` made current, else
/// the device's default stream.
#[inline]
pub(in crate::backend::cuda) fn current(dev: &'static DeviceState) -> OpStream {
    match current_of(dev.id()) {
        Some(s) => OpStream::Current(s),
        None => OpStream::Default(&dev.stream),
    }
}

/// The stream an op runs on: the device's default stream borrowed (the device lives for
/// the process; no count to raise and lower per op), or the stream made current.
pub(in crate::backend::cuda) enum OpStream {
    Default(&'static Arc<CudaStream>),
    Current(Arc<CudaStream>),
}

impl std::ops::Deref for OpStream {
    type Target = Arc<CudaStream>;

    fn deref(&self) -> &Arc<CudaStream> {
        match self {
            OpStream::Default(s) => s,
            OpStream::Current(s) => s,
        }
    }
}

/// The current stream of `dev`, and `len` new elements on it; `inputs` are made ready to
/// be read on that stream.
///
/// This is what the unsafe blocks of the ops rely on: work queued on the returned stream
/// may read `inputs` and write the output, and all that memory stays allocated until that
/// work is done. The output is allocated on the stream (stream-ordered); each input has
/// waited for its writer and recorded the stream as a reader (`CudaBuffer::use_on`), so
/// its free, or its return to its stream's cache, first waits for everything queued on
/// this stream until then.
pub(in crate::backend::cuda) fn alloc(
    dev: &'static DeviceState,
    dtype: DType,
    len: usize,
    inputs: &[&CudaBuffer],
) -> Result<(OpStream, CudaBuffer)> {
    let s = current(dev);
    for b in inputs {
        b.use_on(&s)?;
    }
    let bytes = len.checked_mul(dtype.size()).ok_or_else(|| blocks::out_of_memory(dev.id(), usize::MAX, 0))?;
    let out = CudaBuffer::alloc(dev, &s, bytes)?;
    Ok((s, out))
}

/// The buffer an op produced. Written on a stream other than the device's default, it
/// gets an event marking the write, so that readers on other streams wait for this write
/// alone; on the default stream (single-stream programs) no event.
pub(in crate::backend::cuda) fn done(mut out: CudaBuffer) -> Result<CudaBuffer> {
    let dev = out.device();
    let bytes = out.bytes();
    {
        // The op owns `out`: its books are read and written without a lock.
        let (mut uses, home) = out.owned_books();
        uses.mark_written();
        let writer = uses.writer.as_ref().unwrap_or(home);
        // In a capture the event would mark a point of the graph, which nothing outside it
        // may wait for; a captured reader on another stream waits for the writer instead.
        if bytes > 0 && !Arc::ptr_eq(writer, &dev.stream) && writer.capture().is_none() {
            let written = Arc::new(CudaEvent::create(dev.ordinal, dev.ctx.cu_ctx(), false)?);
            written.record(writer)?;
            uses.ready = Some(written);
        }
    }
    Ok(out)
}

impl CudaBackend {
    /// Copies `bytes` bytes from device address `src` to `dst`, queued on `s`.
    ///
    /// # Safety
    /// `src .. src + bytes` and `dst .. dst + bytes` lie within live allocations of `s`'s
    /// device (or of a peer it may access) that do not overlap and stay allocated until
    /// the copy is done on `s`; `src` was written before this point of `s`'s order, and no
    /// other stream uses `dst` until ordered after the copy.
    pub(in crate::backend::cuda) unsafe fn dtod(s: &CudaStream, dst: u64, src: u64, bytes: usize) -> Result<()> {
        if bytes == 0 {
            return Ok(());
        }
        let span = timing::begin(s);
        // SAFETY: both ranges are valid, ordered and alive on `s`, by the caller's contract.
        let r = dma(|| unsafe { result::memcpy_dtod_async(dst, src, bytes, s.raw.0) })
            .map_err(driver(s.ordinal, "cuMemcpyDtoDAsync"));
        timing::finish(span, s, &r, || timing::copy("DtoD", bytes, "device"));
        r
    }

    /// A new page-locked host block of `bytes` bytes, portable to every context, for the
    /// pinned pool.
    pub(in crate::backend::cuda) fn alloc_pinned_block(&self, bytes: usize) -> Result<usize> {
        // Any context will do: portable memory is pinned for all of them.
        let dev = self.dev(DeviceId::Cuda(0))?;
        dev.bind()?;
        // A context is current (bind above); the driver returns a new page-locked block of
        // `bytes` bytes (or an error) and touches nothing of ours. Its contents are
        // uninitialised: the pinned pool zeroes every block before handing it out.
        let flags = sys::CU_MEMHOSTALLOC_PORTABLE;
        // SAFETY: as said just above.
        match gate(Point::Pinned, failure(OOM), || unsafe { result::malloc_host(bytes, flags) }) {
            Ok(p) => Ok(p as usize),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                Err(blocks::out_of_memory(DeviceId::Pinned, bytes, 0))
            }
            Err(e) => Err(driver(0, "cuMemHostAlloc")(e)),
        }
    }

    /// Frees a block of [`Self::alloc_pinned_block`].
    ///
    /// # Safety
    /// `ptr` came from `alloc_pinned_block` of this backend, is freed once, and nothing
    /// uses it any more (no copy queued on any stream still reads or writes it).
    pub(in crate::backend::cuda) unsafe fn free_pinned_block(&self, ptr: usize) {
        if let Ok(dev) = self.dev(DeviceId::Cuda(0)) {
            if dev.bind().is_ok() {
                // SAFETY: by this fn's contract `ptr` came from `alloc_pinned_block`, that
                // is from cuMemHostAlloc (non-null), is freed once, and nothing uses it;
                // a context is current (bind above).
                let _ = unsafe { result::free_host(ptr as *mut c_void) };
            }
        }
    }
}
