//! Device memory: stream-ordered allocations from the device's pool.

use std::sync::Arc;

use cudarc::driver::{result, sys};

use crate::backend::blocks;
use crate::backend::cuda::driver::device::{driver, failure, DeviceState, OOM};
use crate::backend::cuda::driver::event::CudaEvent;
use crate::backend::cuda::driver::graph::CudaCapture;
use crate::backend::cuda::driver::stream::{free_all_cached, CudaStream};
use crate::backend::sync::uses::{Booked, Guard, Wait};
use crate::backend::Release;
use crate::error::Result;
use crate::faults::{gate, Point};

mod free;
mod home;

use home::Home;

/// `bytes` bytes on one device, allocated on its home stream and freed there
/// (stream-ordered) on drop, after every other stream that used it.
pub(crate) struct CudaBuffer {
    ptr: sys::CUdeviceptr,
    /// The bytes asked for, in the cell the memory books read them from (`None` for zero
    /// bytes, and for foreign memory, which keeps its count in [`Rare::Foreign`]); a block
    /// of `bin(bytes)` bytes is allocated (a cache bin for small buffers, else `bytes`).
    asked: Option<blocks::Asked>,
    dev: &'static DeviceState,
    /// The stream the memory was allocated on, where its free is ordered.
    home: Home,
    uses: Booked<CudaStream, CudaEvent>,
    /// Where the memory came from when not from an op outside a capture. Boxed: rare, and
    /// an op moves its output's buffer a few times.
    rare: Option<Box<Rare>>,
}

/// A buffer's origin, when it is not an eager op's.
enum Rare {
    /// The capture this memory was made in: it belongs to that graph, which frees it.
    Graph(Arc<CudaCapture>),
    /// Memory made outside locus, of that many bytes: given back to its owner, never
    /// freed or cached here.
    Foreign(Release, usize),
}

/// Who wrote a buffer last and who used it (the books both backends keep).
type Uses = crate::backend::sync::uses::Uses<CudaStream, CudaEvent>;

/// Buffers up to this size are cached per stream in power-of-two bins (as PyTorch's
/// caching allocator does), so small ops make no allocation calls to the driver. The
/// cache lives in the stream ([`CudaStream::take_cached`]) and is freed with it.
pub(in crate::backend::cuda::driver) const CACHE_MAX: usize = 1 << 20;
pub(in crate::backend::cuda::driver) const MIN_BIN: usize = 512;

pub(in crate::backend::cuda::driver) fn bin(bytes: usize) -> usize {
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
        write!(f, "CudaBuffer({} bytes on cuda:{})", self.bytes(), self.dev.ordinal)
    }
}

impl CudaBuffer {
    /// Uninitialised memory for `stream` to write. Zero bytes allocate nothing. While
    /// `stream` is captured the memory is the graph's: allocated on the capture's own
    /// stream (never from a cache another stream fills) and freed with the graph.
    pub(crate) fn alloc(dev: &'static DeviceState, stream: &Arc<CudaStream>, bytes: usize) -> Result<Self> {
        let graph = stream.capture();
        let home = Home::of(dev, graph.as_ref().map_or(stream, |c| c.pool()));
        let cap = bin(bytes);
        let uses = Uses::new(Some(Arc::clone(stream)), 0);
        let new = |ptr, asked, mut uses: Uses, home: Home| {
            uses.add_user(Some(&home), stream);
            if let Some(c) = &graph {
                c.count_buffer(true);
            }
            let rare = graph.map(|g| Box::new(Rare::Graph(g)));
            CudaBuffer { ptr, asked, dev, home, uses: Booked::new(uses), rare }
        };
        if bytes == 0 {
            return Ok(new(0, None, uses, home));
        }
        let cached = if cap <= CACHE_MAX { home.take_cached(cap) } else { None };
        let ptr = match &cached {
            Some((p, _)) => *p,
            None => {
                dev.bind()?;
                // The memory comes back uninitialised, which is fine for bytes: every op writes its output before a
                // read; the buffer keeps `home` and frees the block there.
                // SAFETY: `home` is a live stream of `dev` (an `Arc` held for the call); `dev`'s context is current.
                match gate(Point::Alloc, failure(OOM), || unsafe { result::malloc_async(home.raw.0, cap) }) {
                    Ok(p) => p,
                    Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                        // Give back what the cache holds, then try once more.
                        free_all_cached(dev.ordinal);
                        // `free_all_cached` touches only streams of `dev`, so it binds no other context.
                        // SAFETY: as for the first attempt: the same live stream, `dev`'s context still current.
                        match gate(Point::Alloc, failure(OOM), || unsafe { result::malloc_async(home.raw.0, cap) }) {
                            Ok(p) => p,
                            Err(_) => {
                                let free = result::mem_get_info().map(|(free, _)| free).unwrap_or(0);
                                return Err(blocks::out_of_memory(dev.id(), bytes, free));
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
        let asked = match cached {
            Some((_, asked)) => {
                asked.reused(dev.id(), ptr, cap, bytes, home.id);
                asked
            }
            // A GPU's blocks are always booked: the cell comes from the books.
            None => {
                blocks::alloc(dev.id(), ptr, cap, bytes, home.id, true).unwrap_or_else(|| blocks::Asked::new(bytes))
            }
        };
        Ok(new(ptr, Some(asked), uses, home))
    }

    /// Memory made outside locus, `bytes` bytes at `ptr` of `dev`, last written by the
    /// work `stream` has queued so far. `release` gives it back once every stream that
    /// used it is done (see `Drop`).
    ///
    /// # Safety
    /// `ptr .. ptr + bytes` is device memory of `dev` that stays allocated until
    /// `release` runs and that nothing but this buffer uses meanwhile, except work
    /// queued on `stream` before this call.
    pub(crate) unsafe fn foreign(
        dev: &'static DeviceState,
        stream: &Arc<CudaStream>,
        ptr: sys::CUdeviceptr,
        bytes: usize,
        release: Release,
    ) -> Result<Self> {
        let uses = Uses::new(Some(Arc::clone(stream)), 0);
        let counted = dev.account.reserve(bytes);
        // Not counted, so not released: the memory goes back after the stream, as 0 bytes.
        let counted_bytes = if counted.is_ok() { bytes } else { 0 };
        let b = CudaBuffer {
            ptr,
            asked: None,
            dev,
            home: Home::of(dev, stream),
            uses: Booked::new(uses),
            rare: Some(Box::new(Rare::Foreign(release, counted_bytes))),
        };
        counted?;
        // The owner's writes so far are the last write: readers elsewhere wait for them.
        b.after_write(stream)?;
        Ok(b)
    }

    #[inline]
    pub(crate) fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    #[inline]
    pub(crate) fn bytes(&self) -> usize {
        match (&self.asked, self.rare.as_deref()) {
            (Some(asked), _) => asked.get(),
            (None, Some(Rare::Foreign(_, bytes))) => *bytes,
            (None, _) => 0,
        }
    }

    #[inline]
    pub(crate) fn device(&self) -> &'static DeviceState {
        self.dev
    }

    fn uses(&self) -> Guard<'_, CudaStream, CudaEvent, std::sync::MutexGuard<'_, Uses>> {
        self.uses.lock()
    }

    /// The books of memory only its owner can reach, without a lock, and its home stream.
    pub(crate) fn owned_books(&mut self) -> (Guard<'_, CudaStream, CudaEvent, &mut Uses>, &Arc<CudaStream>) {
        (self.uses.get_mut(), &*self.home)
    }

    /// Numbers the write that produced this memory, just queued on its stream.
    pub(crate) fn mark_written(&self) {
        self.uses().mark_written();
    }

    /// Marks the end of the write that produced this memory.
    pub(crate) fn set_ready(&self, written: Arc<CudaEvent>) {
        self.uses().ready = Some(written);
    }

    /// The stream that wrote this memory last.
    pub(crate) fn writer(&self) -> Arc<CudaStream> {
        self.uses().writer.clone().unwrap_or_else(|| Arc::clone(&*self.home))
    }

    /// Whether this memory was made in the capture `c`.
    pub(crate) fn made_in(&self, c: &Arc<CudaCapture>) -> bool {
        self.graph().is_some_and(|g| Arc::ptr_eq(g, c))
    }

    /// The capture this memory was made in.
    fn graph(&self) -> Option<&Arc<CudaCapture>> {
        match self.rare.as_deref() {
            Some(Rare::Graph(g)) => Some(g),
            _ => None,
        }
    }

    /// Prepares this memory to be read on `on`: a stream other than its writer first
    /// waits for the writer (an event, no host wait), and the eventual free waits for
    /// `on`. No wait when `on` is the writer, when `on` already waited for this write,
    /// or when an earlier wait of `on` (an event recorded at or after the write) implies
    /// it; those are counted as skipped.
    ///
    /// While `on` is captured, only memory made in the capture follows these rules; an
    /// input of the graph is ordered at each replay instead, and any other memory is an
    /// error (a replay could outlive it).
    pub(crate) fn use_on(&self, on: &Arc<CudaStream>) -> Result<()> {
        if self.ptr == 0 {
            return Ok(());
        }
        if let Some(c) = on.capture() {
            if !self.made_in(&c) {
                return c.check_input(self.ptr);
            }
        }
        self.uses.read_on(Some(&*self.home), on, |w| wait_books(on, w))
    }

    /// Prepares this memory to be written in place on `on`: `on` waits for the last
    /// write and for every stream that read it since.
    pub(crate) fn before_write(&self, on: &Arc<CudaStream>) -> Result<()> {
        if self.ptr == 0 {
            return Ok(());
        }
        self.uses().write_on(on, |w| wait_books(on, w))
    }

    /// Code outside locus writes this memory on `on` from now on (a raw view): `on`
    /// becomes its writer at once, with no event and a write number no wait can cover,
    /// so until [`CudaBuffer::after_write`] marks the end of that write, every other
    /// stream waits for all of `on`'s work queued by the time of its use. A view that is
    /// never ended (`mem::forget`) is still ordered.
    pub(crate) fn claim_writer(&self, on: &Arc<CudaStream>) {
        self.uses().claim(Some(&*self.home), on);
    }

    /// This memory was just written in place by work queued on `on` (after
    /// [`CudaBuffer::before_write`]): later readers on other streams wait for that write.
    pub(crate) fn after_write(&self, on: &Arc<CudaStream>) -> Result<()> {
        let mut u = self.uses();
        // In a capture the event would mark a point of the graph, which nothing outside it
        // may wait for; a captured reader on another stream waits for the writer instead.
        let ready = match self.bytes() > 0 && !Arc::ptr_eq(on, &self.dev.stream) && on.capture().is_none() {
            true => {
                // The last write's event again when nobody else holds it (a graph's
                // output, rewritten by every replay): waits already queued on it keep the
                // point they were queued for, and nobody can queue a new one.
                let ev = match u.ready.take() {
                    Some(ev) if Arc::strong_count(&ev) == 1 => ev,
                    _ => Arc::new(CudaEvent::create(self.dev.ordinal, self.dev.ctx.cu_ctx(), false)?),
                };
                ev.record(on)?;
                Some(ev)
            }
            false => None,
        };
        u.wrote(Some(&*self.home), on, ready);
        Ok(())
    }

    /// This memory was just written by a graph's replay queued on `on` (an output of the
    /// graph, after [`CudaBuffer::before_write`]). No event marks the write: a reader on
    /// another stream waits for all of `on`'s work queued by the time of its read, which
    /// includes the replay, as on the host backend, whose books record no event for any
    /// write. An event per replay is a driver call on the host and an op on the stream
    /// that the replay's synchronize waits for too.
    pub(crate) fn after_replay(&self, on: &Arc<CudaStream>) -> Result<()> {
        self.uses().wrote(Some(&*self.home), on, None);
        Ok(())
    }

    /// Forgets the writes a capture queued: they have not run, and a replay writes the
    /// memory again (with `before_write` and `after_replay` around it).
    pub(crate) fn forget_captured_writes(&self) {
        self.uses().forget_writes(Some(Arc::clone(&*self.home)));
    }
}

/// `on` waits for what the books say (`sync/uses.rs`): the event after the last write,
/// or all of a stream's work so far.
fn wait_books(on: &Arc<CudaStream>, w: Wait<'_, CudaStream, CudaEvent>) -> Result<()> {
    match w {
        Wait::Event(ev) => wait(on, ev),
        Wait::Stream { stream, .. } => wait_for(on, stream),
    }
}

/// `on` waits for `ev`; a stream that waits for an event of a capture joins it.
fn wait(on: &Arc<CudaStream>, ev: &Arc<CudaEvent>) -> Result<()> {
    crate::backend::cuda::driver::graph::joins(on, ev.capture())?;
    on.wait(ev)
}

/// `on` waits for all work queued on `other` so far; joins `other`'s capture, if any.
fn wait_for(on: &Arc<CudaStream>, other: &Arc<CudaStream>) -> Result<()> {
    crate::backend::cuda::driver::graph::joins(on, other.capture().map(|c| Arc::downgrade(&c)))?;
    on.wait_for(other)
}
