//! Device memory: stream-ordered allocations from the device's pool.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{result, sys};

use super::device::{driver, DeviceState};
use super::event::EventObj;
use super::stream::{free_all_cached, StreamObj};
use crate::error::{Error, Result};

/// `bytes` bytes on one device, written on `stream` and freed there (stream-ordered)
/// on drop, after every other stream that read it.
pub(crate) struct CudaBuffer {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    /// Bytes actually allocated: a cache bin for small buffers, else `bytes`.
    cap: usize,
    dev: &'static DeviceState,
    stream: Arc<StreamObj>,
    /// Other streams that used this memory; the free waits for them.
    readers: Mutex<Vec<Arc<StreamObj>>>,
    /// Recorded right after the write, when the writer is not the device's default
    /// stream: readers on other streams wait for exactly this write, not for all the
    /// writer's later work.
    ready: OnceLock<Arc<EventObj>>,
    /// The number of the write that produced this memory on `stream` (0: not known).
    written: AtomicU64,
}

/// Buffers up to this size are cached per stream in power-of-two bins (as PyTorch's
/// caching allocator does), so small ops make no allocation calls to the driver. The
/// cache lives in the stream ([`StreamObj::take_cached`]) and is freed with it.
const CACHE_MAX: usize = 1 << 20;
const MIN_BIN: usize = 512;

fn bin(bytes: usize) -> usize {
    if bytes == 0 {
        0
    } else if bytes <= CACHE_MAX {
        bytes.next_power_of_two().max(MIN_BIN)
    } else {
        bytes
    }
}

impl std::fmt::Debug for CudaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaBuffer({} bytes on cuda:{})", self.bytes, self.dev.ordinal)
    }
}

impl CudaBuffer {
    /// Uninitialised memory, ordered on `stream`. Zero bytes allocate nothing.
    pub(crate) fn alloc(dev: &'static DeviceState, stream: &Arc<StreamObj>, bytes: usize) -> Result<Self> {
        let cap = bin(bytes);
        let new = |ptr| CudaBuffer {
            ptr,
            bytes,
            cap,
            dev,
            stream: Arc::clone(stream),
            readers: Mutex::new(Vec::new()),
            ready: OnceLock::new(),
            written: AtomicU64::new(0),
        };
        if bytes == 0 {
            return Ok(new(0));
        }
        let cached = if cap <= CACHE_MAX { stream.take_cached(cap) } else { None };
        let ptr = match cached {
            Some(p) => p,
            None => {
                dev.bind()?;
                // SAFETY: `stream` is a live stream of `dev` (an `Arc<StreamObj>` held for the call), and `dev`'s
                // context is current (bind above). The memory comes back uninitialised, which is fine for bytes: every
                // op writes its output before a read; the buffer keeps `stream` and frees the block there.
                match unsafe { result::malloc_async(stream.raw.0, cap) } {
                    Ok(p) => p,
                    Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                        // Give back what the cache holds, then try once more.
                        free_all_cached(dev.ordinal);
                        // SAFETY: as for the first attempt: the same live stream, and
                        // `dev`'s context still current (`free_all_cached` touches only
                        // streams of `dev`, so it binds no other context).
                        match unsafe { result::malloc_async(stream.raw.0, cap) } {
                            Ok(p) => p,
                            Err(_) => {
                                let free = result::mem_get_info().map(|(free, _)| free).unwrap_or(0);
                                return Err(Error::OutOfMemory { device: dev.id(), requested: bytes, free });
                            }
                        }
                    }
                    Err(e) => return Err(driver(dev.ordinal, "cuMemAllocAsync")(e)),
                }
            }
        };
        // The account has no capacity of its own here: the driver says when memory ends.
        // It counts the bytes asked for, as the host backend does (`memory_allocated`).
        dev.account.reserve(bytes)?;
        Ok(new(ptr))
    }

    pub(crate) fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    pub(crate) fn device(&self) -> &'static DeviceState {
        self.dev
    }

    /// Numbers the write that produced this memory, just queued on its stream.
    pub(crate) fn mark_written(&self) {
        self.written.store(self.stream.order.mark_write(), Ordering::SeqCst);
    }

    /// Marks the end of the write that produced this memory.
    pub(crate) fn set_ready(&self, written: Arc<EventObj>) {
        let _ = self.ready.set(written);
    }

    /// The stream that wrote this memory.
    pub(crate) fn stream(&self) -> &Arc<StreamObj> {
        &self.stream
    }

    /// Prepares this memory to be read on `on`: a stream other than its writer first
    /// waits for the writer (an event, no host wait), and the eventual free waits for
    /// `on`. No wait when `on` is the writer, when `on` already waited for this memory,
    /// or when an earlier wait of `on` (an event recorded at or after the write) implies
    /// it; those are counted as skipped.
    pub(crate) fn use_on(&self, on: &Arc<StreamObj>) -> Result<()> {
        if Arc::ptr_eq(&self.stream, on) || self.ptr == 0 {
            return Ok(());
        }
        let mut readers = self.readers.lock().unwrap_or_else(|p| p.into_inner());
        if readers.iter().any(|r| Arc::ptr_eq(r, on)) {
            crate::backend::ordering::count_skipped();
            return Ok(());
        }
        if on.order.has_waited(self.stream.id, self.written.load(Ordering::SeqCst)) {
            crate::backend::ordering::count_skipped();
        } else {
            match self.ready.get() {
                Some(ev) => on.wait(ev)?,
                None => on.wait_for(&self.stream)?,
            }
            crate::backend::count_cross_stream_wait();
        }
        readers.push(Arc::clone(on));
        Ok(())
    }
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        if self.ptr == 0 {
            return;
        }
        self.dev.account.release(self.bytes);
        if self.dev.bind().is_err() {
            // Without the context nothing can be ordered: the block is not reused.
            return;
        }
        let readers = std::mem::take(self.readers.get_mut().unwrap_or_else(|p| p.into_inner()));
        for r in &readers {
            if self.stream.wait_for(r).is_err() {
                // A reader may still use the memory and its end cannot be ordered before
                // a reuse: leak the block rather than hand it out again.
                return;
            }
        }
        // Work queued later on this stream runs after every use above, so the memory can
        // be handed out again on this stream at once.
        if self.cap <= CACHE_MAX {
            // SAFETY: the block holds `self.cap` bytes (a cache bin, allocated on `self.stream` or taken from its
            // cache) and this buffer, its only owner, is going; every reader's use is ordered before this point of the
            // stream (the waits above), and the writer's own work is on this stream.
            unsafe { self.stream.put_cached(self.cap, self.ptr) };
        } else {
            // The block came from cuMemAllocAsync on `self.stream` (a larger-than-cache block is never shared with
            // another buffer) and is freed only here, once;
            // SAFETY: the stream is alive (held by `self`), the device's context is current (bind above), and every
            // reader's use is ordered before this point of the stream (the waits above).
            let _ = unsafe { result::free_async(self.ptr, self.stream.raw.0) };
        }
    }
}
