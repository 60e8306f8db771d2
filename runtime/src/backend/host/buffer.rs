//! Host memory of the host backend's devices and of the `cpu` and `pinned` placements:
//! pageable heap or huge-page mappings, or blocks of the pinned pool, with the stream
//! that wrote them, the streams that have read them, and the hazard checker's track.
//!
//! Queued jobs reach the memory through a [`Span`]: pageable memory stays allocated while
//! a span holds it (a stream-ordered free; it then goes back to the host cache, which may
//! hand it out again), pinned memory goes back to the pool when the buffer is dropped, as
//! on the GPU, and the pool frees a block only once no span uses it.

use std::sync::Arc;

use crate::backend::account::MemoryAccount;
use crate::backend::api::fence::Fence;
use crate::backend::blocks;
use crate::backend::host::cache::{HostBlock, CACHE};
use crate::backend::host::graph::HostCapture;
use crate::backend::host::streams::{HostEvent, HostStream};
use crate::backend::pinned_pool::{self as pinned, InFlight, PinnedBlock};
use crate::backend::sync::hazard::{self, Kind, Region, Track};
use crate::backend::sync::uses::{Booked, Guard};
use crate::backend::Release;
use crate::device_id::DeviceId;
use crate::element::{DType, Element};
use crate::error::Result;
use crate::faults::{self, Point};

/// Pageable memory, shared by a buffer and the jobs that use it. Only held (its drop
/// gives the memory back); every access goes through the buffer's or a span's pointer.
#[derive(Debug)]
#[allow(dead_code)]
enum Owned {
    /// A block of the host cache, back in the cache once the buffer and every job
    /// holding it have dropped it.
    Cached(HostBlock),
    /// Memory made outside locus: given back to its owner when the last span goes.
    Foreign(Release),
}

#[derive(Debug)]
enum Keep {
    Owned(Arc<Owned>),
    Pinned(PinnedBlock),
}

/// Host memory of one device, 8-byte aligned so that any element type can view it.
#[derive(Debug)]
pub(crate) struct HostBuffer {
    /// The first byte; all access goes through it (see [`Span`]).
    ptr: *mut u8,
    len: usize,
    keep: Keep,
    /// The checker's record of pageable memory (pinned blocks carry their own).
    track: Track,
    pub(in crate::backend::host) account: &'static MemoryAccount,
    /// The simulated stream this memory was made on, where its free is ordered; `None`
    /// for host placements, whose ops run on the calling thread.
    pub(in crate::backend::host) home: Option<Arc<HostStream>>,
    /// Who wrote the memory last and who used it (simulated devices only).
    pub(in crate::backend::host) uses: Booked<HostStream, HostEvent>,
    /// The capture this memory was made in: it belongs to that graph.
    pub(in crate::backend::host) graph: Option<Arc<HostCapture>>,
}

/// Who wrote a host buffer last and who used it (the books both backends keep).
pub(in crate::backend::host) type Uses = crate::backend::sync::uses::Uses<HostStream, HostEvent>;

// The buffer owns its memory (a Vec, a mapping or a pool block) as a Vec<u8> would; the
// raw pointer is into that memory. Jobs on other threads reach it only through spans,
// ordered by their stream (what the hazard checker verifies).
// SAFETY: owned memory moves with the buffer, like a Vec<u8>'s (see above).
unsafe impl Send for HostBuffer {}
// SAFETY: as for Send: `&HostBuffer` gives read access only.
unsafe impl Sync for HostBuffer {}

/// A job's handle on a buffer's memory: the address, and what keeps it allocated.
pub(in crate::backend::host) struct Span {
    ptr: *mut u8,
    len: usize,
    _keep: SpanKeep,
}

/// Only held, for what its drop does.
#[allow(dead_code)]
enum SpanKeep {
    Owned(Arc<Owned>),
    Pinned(InFlight),
}

// SAFETY: a span is an address into memory kept allocated by what it holds (an `Arc` of
// the allocation, or the pool's in-flight count); the job that owns it runs on one
// worker thread at a time.
unsafe impl Send for Span {}

impl Span {
    /// The memory, read by a job.
    ///
    /// # Safety
    /// The job runs after the memory's last write in stream order, and no write to it
    /// runs while the returned slice lives.
    pub(in crate::backend::host) unsafe fn bytes(&self) -> &[u8] {
        // SAFETY: `ptr..ptr+len` is allocated while the span lives; the caller rules out
        // concurrent writes.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The memory, written by a job.
    ///
    /// # Safety
    /// No other access to the memory runs while the returned slice lives (the job is
    /// ordered after every earlier use, and every later use is ordered after it).
    pub(in crate::backend::host) unsafe fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, and the caller rules out every other access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl crate::backend::api::traits::PinnedMemory for HostBuffer {
    fn len(&self) -> usize {
        self.len
    }

    fn bytes(&self) -> &[u8] {
        HostBuffer::bytes(self)
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        HostBuffer::bytes_mut(self)
    }

    fn retire(&self) {
        HostBuffer::retire(self)
    }
}

impl HostBuffer {
    /// `len` bytes on `account`'s device, written on `stream`, initialised but unspecified:
    /// a block of the host cache or of the pinned pool (a reused block keeps its old
    /// contents, a new one is zeroed). The caller writes every byte before any read.
    pub(in crate::backend::host) fn alloc(
        account: &'static MemoryAccount,
        len: usize,
        stream: Option<Arc<HostStream>>,
    ) -> Result<Self> {
        let oom = || blocks::out_of_memory(account.device, len, 0);
        // An allocation of a device that the fault plan fails is out of memory.
        if !account.device.is_host() && faults::fails(Point::Alloc).is_some() {
            return Err(oom());
        }
        account.reserve(len)?;
        let made = if account.device == DeviceId::Pinned {
            pinned::acquire(len).map(|b| (b.ptr(), Keep::Pinned(b)))
        } else {
            CACHE.acquire(len).ok_or_else(oom).map(|b| (b.ptr(), Keep::Owned(Arc::new(Owned::Cached(b)))))
        };
        match made {
            Ok((ptr, keep)) => {
                if len > 0 {
                    let key = stream.as_ref().map_or(0, |s| s.key);
                    blocks::alloc(account.device, ptr as u64, len, len, key, true);
                }
                // The write that makes the contents is not queued yet: numbered by
                // `mark_written` once it is (0, which no wait covers, until then).
                let graph = stream.as_ref().and_then(|s| s.capture());
                if let Some(c) = &graph {
                    c.count_buffer(true);
                }
                let uses = Uses::new(stream.clone(), 0);
                Ok(HostBuffer {
                    ptr,
                    len,
                    keep,
                    track: Track::default(),
                    account,
                    home: stream,
                    uses: Booked::new(uses),
                    graph,
                })
            }
            Err(e) => {
                account.release(len);
                Err(e)
            }
        }
    }

    /// Memory made outside locus, `len` bytes at `ptr` on `account`'s device, last written
    /// by what `stream` has queued; `release` runs once the buffer and every job that
    /// uses it are gone.
    ///
    /// # Safety
    /// `ptr .. ptr + len` is valid for reads and writes until `release` runs, and nothing
    /// else uses it meanwhile except work queued on `stream` before this call.
    pub(in crate::backend::host) unsafe fn foreign(
        account: &'static MemoryAccount,
        ptr: *mut u8,
        len: usize,
        stream: Option<Arc<HostStream>>,
        release: Release,
    ) -> Result<Self> {
        account.reserve(len)?;
        let written = stream.as_ref().map_or(0, |s| s.order.mark_write());
        let graph = stream.as_ref().and_then(|s| s.capture());
        if let Some(c) = &graph {
            c.count_buffer(true);
        }
        let uses = Uses::new(stream.clone(), written);
        Ok(HostBuffer {
            ptr,
            len,
            keep: Keep::Owned(Arc::new(Owned::Foreign(release))),
            track: Track::default(),
            account,
            home: stream,
            uses: Booked::new(uses),
            graph,
        })
    }

    /// Records with the hazard checker that host code reads (or writes) this memory
    /// now, through its address rather than a slice.
    pub(in crate::backend::host) fn host_access(&self, write: bool) {
        self.host_use(if write { Kind::Write } else { Kind::Read }, "a raw view");
    }

    #[cfg(feature = "ndarray")]
    /// The memory of `v` as pageable memory of the `cpu` placement, without a copy: the
    /// vector is dropped when the buffer and every job that uses it are gone.
    pub(in crate::backend::host) fn from_vec<T: Element>(
        account: &'static MemoryAccount,
        mut v: Vec<T>,
    ) -> Result<Self> {
        let (ptr, len) = (v.as_mut_ptr() as *mut u8, std::mem::size_of_val(&v[..]));
        // SAFETY: `v`'s heap block (a dangling, aligned pointer when empty) holds `len`
        // bytes and stays where it is while `v` lives, moved into `release`; nothing else
        // reaches it, and no stream work came before.
        unsafe { Self::foreign(account, ptr, len, None, Release::new(move || drop(v))) }
    }

    /// Who wrote this memory last and who used it.
    pub(in crate::backend::host) fn uses(&self) -> Guard<'_, HostStream, HostEvent, std::sync::MutexGuard<'_, Uses>> {
        self.uses.lock()
    }

    /// Numbers the write that makes this memory's contents, just queued on its stream:
    /// a number taken before the job is queued could be claimed by an event another
    /// thread records on the stream in between, before the job, and a stream waiting for
    /// that event would then skip the wait for this write.
    pub(in crate::backend::host) fn mark_written(&self) {
        self.uses().mark_written();
    }

    /// The address, which names the memory while it lives (a graph's inputs).
    pub(in crate::backend::host) fn addr(&self) -> usize {
        self.ptr as usize
    }

    /// Bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// This memory as the hazard checker names it.
    pub(in crate::backend::host) fn region(&self, dtype: Option<DType>) -> Region<'_> {
        let track = match &self.keep {
            Keep::Pinned(b) => b.track(),
            Keep::Owned(_) => &self.track,
        };
        Region { track, device: self.account.device, bytes: self.len, dtype }
    }

    /// A handle on the memory for a queued job.
    pub(in crate::backend::host) fn span(&self) -> Span {
        let keep = match &self.keep {
            Keep::Owned(o) => SpanKeep::Owned(Arc::clone(o)),
            Keep::Pinned(b) => SpanKeep::Pinned(b.in_flight()),
        };
        Span { ptr: self.ptr, len: self.len, _keep: keep }
    }

    fn host_use(&self, kind: Kind, op: &'static str) {
        if hazard::enabled() && self.len > 0 {
            hazard::host_use(self.region(None), kind, op);
        }
    }

    /// The bytes, read by host code now: for memory a stream wrote, only after the host
    /// waited for that write (the checker reports it otherwise).
    pub(crate) fn bytes(&self) -> &[u8] {
        self.host_use(Kind::Read, "a host read");
        self.raw()
    }

    fn raw(&self) -> &[u8] {
        // SAFETY: the buffer owns `len` bytes at `ptr` (see the Send impl); `&self` allows
        // no host write meanwhile, and stream writes are ordered before host reads.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The bytes, written by host code now (fresh memory, or memory no queued work uses).
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        self.host_use(Kind::Write, "a host write");
        // SAFETY: as in `bytes`, and `&mut self` makes the host access unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// The elements, read by host code now (`Tensor::as_slice` and friends).
    pub(crate) fn as_slice<T: Element>(&self) -> &[T] {
        self.host_use(Kind::Read, "as_slice");
        bytemuck::cast_slice(self.raw())
    }

    /// Whether this is page-locked memory from the pinned pool.
    pub(crate) fn is_pinned(&self) -> bool {
        matches!(self.keep, Keep::Pinned(_))
    }

    /// Keeps pinned memory from reuse by the pool, and from host writes through
    /// [`HostBuffer::writable`], until `event` has completed.
    pub(crate) fn hold_until(&self, event: Arc<dyn Fence>) {
        if let Keep::Pinned(b) = &self.keep {
            b.hold_until(event);
        }
    }

    /// Retires pinned memory that a copy may still use but whose end cannot be observed:
    /// it is never written by the host nor reused again.
    pub(crate) fn retire(&self) {
        if let Keep::Pinned(b) = &self.keep {
            b.retire();
        }
    }

    /// The bytes, for the host to write in place, once every copy that still uses this
    /// memory has completed (pageable memory has none). The only way to write a buffer
    /// that tensors have shared: freshly allocated buffers may use `bytes_mut`.
    pub(crate) fn writable<T: Element>(&mut self) -> Result<&mut [T]> {
        if let Keep::Pinned(b) = &self.keep {
            b.wait_unused()?;
        }
        self.host_use(Kind::Write, "as_mut_slice");
        // SAFETY: as in `bytes_mut`.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) };
        Ok(bytemuck::cast_slice_mut(bytes))
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        let foreign = matches!(&self.keep, Keep::Owned(o) if matches!(**o, Owned::Foreign(_)));
        if self.len > 0 && !foreign {
            blocks::free(self.account.device, self.ptr as u64, false);
        }
        match &self.graph {
            Some(c) => {
                c.count_buffer(false);
                c.hold(self.len); // the graph's recorded jobs still hold the memory
            }
            None => self.account.release(self.len),
        }
        if let (Some(owner), true) = (&self.home, hazard::enabled() && self.len > 0) {
            // Stream-ordered free on the home stream, after the streams that used it.
            let users: Vec<_> = self.uses.get_mut().users.iter().map(|r| r.agent()).collect();
            hazard::freed(self.region(None), owner.agent(), &users);
        }
    }
}
