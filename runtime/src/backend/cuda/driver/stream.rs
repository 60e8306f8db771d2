//! CUDA streams, reference-counted so that memory allocated on a stream can still be
//! freed on it after the user's `Stream` is gone.
//!
//! Each stream owns what is ordered on it alone: the small device blocks freed on it
//! (reused by later allocations on the same stream without a driver call) and, once it
//! runs a matmul, a cuBLAS handle bound to it. When the last reference goes, the cached
//! blocks are freed on the stream and the handle goes back to a per-device pool behind
//! an event, so a dropped stream (a Loader's, one made per iteration) leaves nothing
//! behind.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use cudarc::cublas::sys::cublasHandle_t;
use cudarc::driver::{result, sys};

use crate::backend::blocks::Asked;
use crate::backend::cuda::driver::buffer::{CACHE_MAX, MIN_BIN};
use crate::backend::cuda::driver::device::{driver, failure, set_current, Handle, OOM, UNKNOWN};
use crate::backend::cuda::driver::event::CudaEvent;
use crate::backend::cuda::driver::graph::CudaCapture;
use crate::backend::cuda::driver::timing;
use crate::backend::spin_lock::SpinLock;
use crate::backend::sync::ordering::{new_stream_id, Order};
use crate::error::{Error, Result};
use crate::faults::{gate, Point};

/// Live stream objects of this process (the devices' own included).
static LIVE: AtomicUsize = AtomicUsize::new(0);

/// How many CUDA streams locus holds now.
pub(crate) fn live_streams() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Streams that hold cached blocks, so that an out-of-memory retry can free them all.
static WITH_CACHE: Mutex<Vec<Weak<CudaStream>>> = Mutex::new(Vec::new());

/// cuBLAS handles of dropped streams, by device, each with the event after which the
/// dropped stream's last gemm (and so its use of the handle's workspace) is over.
type PooledBlas = (u32, Handle<cublasHandle_t>, Option<CudaEvent>);
static BLAS_POOL: Mutex<Vec<PooledBlas>> = Mutex::new(Vec::new());

/// A cuBLAS error as a locus error naming the device and the call.
pub(in crate::backend::cuda) fn blas_err(device: u32, call: &str, e: impl std::fmt::Debug) -> Error {
    let message = crate::faults::noted(format!("{e:?}"));
    Error::Kernel { device: crate::device_id::DeviceId::Cuda(device), name: call.into(), message }
}

/// One list per cache bin (`MIN_BIN`, twice that, ... up to `CACHE_MAX` bytes): a block's
/// list is found by its size's bit, not by hashing it.
type Bins = [Vec<(sys::CUdeviceptr, Asked)>; (CACHE_MAX / MIN_BIN).trailing_zeros() as usize + 1];

/// The list of [`Bins`] for blocks of `cap` bytes; `None` for a size that is no bin.
fn bin_index(cap: usize) -> Option<usize> {
    let ok = cap.is_power_of_two() && (MIN_BIN..=CACHE_MAX).contains(&cap);
    ok.then(|| (cap / MIN_BIN).trailing_zeros() as usize)
}

/// A stream of one device. Destroyed with its last reference (the device's default
/// stream lives as long as the process).
pub(crate) struct CudaStream {
    pub raw: Handle<sys::CUstream>,
    pub ordinal: u32,
    /// A process-unique number, for the ordering books of other streams.
    pub id: u64,
    /// The writes queued here and what this stream has waited for.
    pub order: Order,
    ctx: Handle<sys::CUcontext>,
    /// Freed small blocks ordered on this stream, by capacity: taken and given back once
    /// per eager op each, a push or a pop under the lock.
    cache: SpinLock<Bins>,
    /// Whether this stream is listed in `WITH_CACHE`.
    listed: AtomicBool,
    /// This stream's own cuBLAS handle, bound to it once: no other thread or stream can
    /// change the stream a gemm queued through it runs on.
    blas: OnceLock<std::result::Result<Handle<cublasHandle_t>, Error>>,
    /// Whether the stream may be in a capture (then `capture` says which).
    capturing: AtomicBool,
    capture: Mutex<Option<Arc<CudaCapture>>>,
    /// Whether this is its device's default stream (track 0 of a trace).
    default: AtomicBool,
    /// The end of the last op timed on this stream while a trace is on (`timing`).
    last_timed: Mutex<Option<Arc<CudaEvent>>>,
    /// Held from the first timing event of a traced op to its last (`timing::begin`), so
    /// that ops queued here by several threads (the copy threads on a copy stream) never
    /// fall between another op's two marks.
    timed_op: Mutex<()>,
}

impl std::fmt::Debug for CudaStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stream {:p} on cuda:{}", self.raw.0, self.ordinal)
    }
}

impl crate::backend::sync::uses::BookedStream for CudaStream {
    fn stream_id(&self) -> u64 {
        self.id
    }

    fn order(&self) -> &Order {
        &self.order
    }
}

impl CudaStream {
    /// A new non-blocking stream; the device's context must be current.
    pub(crate) fn create(ordinal: u32, ctx: sys::CUcontext) -> Result<Self> {
        let raw =
            gate(Point::NewStream, failure(OOM), || result::stream::create(result::stream::StreamKind::NonBlocking))
                .map_err(driver(ordinal, "cuStreamCreate"))?;
        LIVE.fetch_add(1, Ordering::Relaxed);
        Ok(CudaStream {
            raw: Handle(raw),
            ordinal,
            id: new_stream_id(),
            order: Order::default(),
            ctx: Handle(ctx),
            cache: SpinLock::new(Bins::default()),
            listed: AtomicBool::new(false),
            blas: OnceLock::new(),
            capturing: AtomicBool::new(false),
            capture: Mutex::new(None),
            default: AtomicBool::new(false),
            last_timed: Mutex::new(None),
            timed_op: Mutex::new(()),
        })
    }

    /// The device's context, current while this stream's work is queued.
    pub(crate) fn ctx(&self) -> sys::CUcontext {
        self.ctx.0
    }

    /// Marks this stream as its device's default one.
    pub(crate) fn set_default(&self) {
        self.default.store(true, Ordering::Relaxed);
    }

    /// Whether this is its device's default stream.
    pub(crate) fn is_default(&self) -> bool {
        self.default.load(Ordering::Relaxed)
    }

    /// The end of the last op timed here (see `timing`).
    pub(in crate::backend::cuda) fn last_timed(&self) -> Option<Arc<CudaEvent>> {
        self.last_timed.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Held while one traced op is queued here, between its two timing events.
    pub(in crate::backend::cuda) fn timed_op(&self) -> std::sync::MutexGuard<'_, ()> {
        self.timed_op.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(in crate::backend::cuda) fn set_last_timed(&self, end: Arc<CudaEvent>) {
        *self.last_timed.lock().unwrap_or_else(|p| p.into_inner()) = Some(end);
    }

    /// The driver's `CUstream`, as an address, for code outside locus.
    pub(crate) fn handle(&self) -> usize {
        self.raw.0 as usize
    }

    /// The capture this stream's work goes into now, if any.
    #[inline]
    pub(crate) fn capture(&self) -> Option<Arc<CudaCapture>> {
        if !self.capturing.load(Ordering::Acquire) {
            return None;
        }
        self.capture_slow()
    }

    #[cold]
    fn capture_slow(&self) -> Option<Arc<CudaCapture>> {
        match &*self.capture.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(c) if !c.ended() => Some(Arc::clone(c)),
            _ => None,
        }
    }

    /// From now on this stream's work goes into `c` (`None`: runs again). The capture
    /// clears it from every stream in it when it ends.
    pub(crate) fn set_capture(&self, c: Option<&Arc<CudaCapture>>) {
        *self.capture.lock().unwrap_or_else(|p| p.into_inner()) = c.cloned();
        self.capturing.store(c.is_some(), Ordering::Release);
    }

    pub(crate) fn synchronize(&self) -> Result<()> {
        // SAFETY: the stream is alive (destroyed only in drop).
        unsafe { result::stream::synchronize(self.raw.0) }.map_err(driver(self.ordinal, "cuStreamSynchronize"))
    }

    /// Makes this stream wait for everything queued on `other` so far (no host wait).
    pub(crate) fn wait_for(&self, other: &CudaStream) -> Result<()> {
        let ev = CudaEvent::create(other.ordinal, other.ctx.0, false)?;
        ev.record(other)?;
        self.wait(&ev)
    }

    pub(crate) fn wait(&self, ev: &CudaEvent) -> Result<()> {
        timing::traced_wait(self, ev.traced_at(), || {
            // SAFETY: both handles are alive; the driver copies the event's state at the call.
            gate(Point::Wait, failure(UNKNOWN), || unsafe {
                result::stream::wait_event(self.raw.0, ev.raw.0, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
            })
            .map_err(driver(self.ordinal, "cuStreamWaitEvent"))
        })?;
        if let Some((writer, upto)) = ev.recorded_at() {
            self.order.note_wait(writer, upto);
        }
        Ok(())
    }

    /// A cached block of `cap` bytes freed on this stream, if any, with its cell in the
    /// memory books.
    pub(crate) fn take_cached(&self, cap: usize) -> Option<(sys::CUdeviceptr, Asked)> {
        let bin = bin_index(cap)?;
        self.cache.lock()[bin].pop()
    }

    /// Caches a block of `cap` bytes whose last use is queued on this stream.
    ///
    /// # Safety
    /// `ptr` is a block of exactly `cap` bytes from `cuMemAllocAsync` on this stream's
    /// device that nothing else owns from here on (it will be handed out again by
    /// `take_cached` and freed by `free_cached`), and every use of it, on any stream, is
    /// ordered before this point of this stream. `asked` is its cell in the memory books.
    pub(crate) unsafe fn put_cached(self: &Arc<Self>, cap: usize, ptr: sys::CUdeviceptr, asked: Asked) {
        let Some(bin) = bin_index(cap) else {
            // Not a bin's size: no `take_cached` would hand it out, so it goes back now.
            // SAFETY: this fn's contract is `give_back`'s.
            unsafe { self.give_back(ptr) };
            return;
        };
        self.cache.lock()[bin].push((ptr, asked));
        // Never with this stream's cache locked: `cached_bytes` locks the list first.
        if !self.listed.load(Ordering::Relaxed) && !self.listed.swap(true, Ordering::Relaxed) {
            let mut list = WITH_CACHE.lock().unwrap_or_else(|p| p.into_inner());
            list.retain(|w| w.strong_count() > 0);
            list.push(Arc::downgrade(self));
        }
    }

    /// Bytes of the blocks cached on this stream.
    pub(crate) fn cached_bytes(&self) -> usize {
        let bins = self.cache.lock();
        bins.iter().enumerate().map(|(i, v)| (MIN_BIN << i) * v.len()).sum()
    }

    /// Frees this stream's cached blocks to the driver's pool, ordered on this stream.
    fn free_cached(&self) {
        let blocks = std::mem::take(&mut *self.cache.lock());
        for (ptr, _) in blocks.into_iter().flatten() {
            // SAFETY: each cached block came from cuMemAllocAsync on this device, is owned by the cache alone (taken
            // out of it just above), and its last use is queued on this stream (`put_cached`'s contract).
            unsafe { self.give_back(ptr) };
        }
    }

    /// Frees a block to the driver's pool, ordered on this stream, and takes it off the
    /// books.
    ///
    /// # Safety
    /// `ptr` came from `cuMemAllocAsync` on this stream's device, nothing else owns it, and
    /// every use of it, on any stream, is ordered before this point of this stream.
    unsafe fn give_back(&self, ptr: sys::CUdeviceptr) {
        // SAFETY: the block is the driver's to free once this stream reaches this point (this fn's contract).
        let _ = unsafe { result::free_async(ptr, self.raw.0) };
        crate::backend::blocks::release_cached(crate::device_id::DeviceId::Cuda(self.ordinal), ptr);
    }

    /// This stream's cuBLAS handle: one from a dropped stream of the device (after that
    /// stream's last gemm) or a new one, bound to this stream once. The device's
    /// context must be current.
    pub(crate) fn blas(&self) -> Result<cublasHandle_t> {
        let h = self.blas.get_or_init(|| {
            let pooled = {
                let mut pool = BLAS_POOL.lock().unwrap_or_else(|p| p.into_inner());
                pool.iter().position(|(o, _, _)| *o == self.ordinal).map(|i| pool.swap_remove(i))
            };
            let h = match pooled {
                Some((_, h, last_use)) => {
                    if let Some(ev) = last_use {
                        self.wait(&ev)?;
                    }
                    h.0
                }
                None => {
                    cudarc::cublas::result::create_handle().map_err(|e| blas_err(self.ordinal, "cublasCreate", e))?
                }
            };
            // SAFETY: `h` is a live handle owned by this stream alone from here on.
            unsafe { cudarc::cublas::result::set_stream(h, self.raw.0 as _) }
                .map_err(|e| blas_err(self.ordinal, "cublasSetStream", e))?;
            Ok(Handle(h))
        });
        h.as_ref().map(|h| h.0).map_err(Clone::clone)
    }
}

/// Frees the cached blocks of every stream of device `ordinal` (before retrying an
/// allocation that ran out of memory).
pub(crate) fn free_all_cached(ordinal: u32) {
    let streams: Vec<Arc<CudaStream>> = {
        let list = WITH_CACHE.lock().unwrap_or_else(|p| p.into_inner());
        list.iter().filter_map(Weak::upgrade).filter(|s| s.ordinal == ordinal).collect()
    };
    for s in streams {
        // A captured stream's frees would go into its graph; its blocks stay cached.
        if s.capture().is_none() {
            s.free_cached();
        }
    }
}

/// Bytes cached on the streams of device `ordinal`.
pub(crate) fn cached_bytes(ordinal: u32) -> usize {
    let streams: Vec<Arc<CudaStream>> = {
        let list = WITH_CACHE.lock().unwrap_or_else(|p| p.into_inner());
        list.iter().filter_map(Weak::upgrade).filter(|s| s.ordinal == ordinal).collect()
    };
    streams.iter().map(|s| s.cached_bytes()).sum()
}

impl Drop for CudaStream {
    fn drop(&mut self) {
        LIVE.fetch_sub(1, Ordering::Relaxed);
        // Queued work still completes; the driver releases the stream afterwards.
        if set_current(self.ordinal, self.ctx.0).is_err() {
            return;
        }
        self.free_cached();
        if let Some(Ok(h)) = self.blas.take() {
            // The next stream to take the handle waits for this one's last gemm; if the
            // event cannot be recorded, wait here.
            let marked = CudaEvent::create(self.ordinal, self.ctx.0, false).and_then(|ev| ev.record(self).map(|()| ev));
            let last_use = match marked {
                Ok(ev) => Some(Some(ev)),
                Err(_) => self.synchronize().ok().map(|()| None),
            };
            // When the stream's work cannot be observed at all, the handle is not reused.
            if let Some(last_use) = last_use {
                BLAS_POOL.lock().unwrap_or_else(|p| p.into_inner()).push((self.ordinal, h, last_use));
            }
        }
        // SAFETY: the last reference is gone; nothing queues work on this stream again.
        let _ = unsafe { result::stream::destroy(self.raw.0) };
    }
}

#[cfg(test)]
mod bin_tests {
    use super::{bin_index, Bins, CACHE_MAX, MIN_BIN};

    #[test]
    fn each_bin_size_has_its_own_list_and_other_sizes_none() {
        let bins = Bins::default();
        let mut seen = vec![false; bins.len()];
        let mut cap = MIN_BIN;
        while cap <= CACHE_MAX {
            let i = bin_index(cap).expect("a bin's size");
            assert!(!seen[i], "two sizes share list {i}");
            seen[i] = true;
            cap *= 2;
        }
        assert!(seen.iter().all(|&s| s), "a list no size reaches");
        for odd in [0, 1, MIN_BIN / 2, MIN_BIN + 1, 3 * MIN_BIN, CACHE_MAX * 2] {
            assert_eq!(bin_index(odd), None, "{odd} bytes");
        }
    }
}
