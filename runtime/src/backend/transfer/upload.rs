//! The inline path of an upload from pageable memory to a device: ONE block of the
//! pinned pool, cut into pieces, on the calling thread and the op's stream (which copies
//! take it: `paths`; the download is `download`). The source is copied into
//! the block piece by piece, and each piece's DMA is queued right after its copy, so the
//! DMA of a piece overlaps the copy of the next; one event after the last DMA holds the
//! block. The cuda backend queues real DMAs (`cuda/staged.rs`), the host backend jobs on
//! a simulated stream (`host/inline.rs`).
//!
//! The rule is the pinned pool's: the block comes from [`pinned::acquire`], which hands
//! out a block only once every copy that used it has completed, and goes back held until
//! the event after its last DMA ([`PinnedBlock::hold_until`]); if that event cannot be
//! recorded the host waits for the stream, and if even that fails the block is retired.
//! Nothing here depends on a `Drop` of anything the caller holds.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use crate::backend::api::fence::Fence;
use crate::backend::pinned_pool::{self as pinned, PinnedBlock};
use crate::backend::transfer::paths::{inline_upload, MIN_PIECE};
use crate::backend::transfer::stream_copy::stream_copy;
use crate::backend::workers::{copy_threads, detach};
use crate::error::{Error, Result};

/// What the inline upload needs of a backend: the DMA of one piece of the pinned block
/// to the same bytes of the destination, queued in stream order, and the event after them.
pub(crate) trait PieceUploads {
    /// Queues the copy of bytes `at .. at + len` of `stage` to bytes `at .. at + len` of
    /// the destination, after everything queued before on the destination's stream.
    ///
    /// # Safety
    /// `at + len` is at most the length of the upload; those bytes of `stage` hold the
    /// data now, and neither they nor the rest of `stage` are written, reused or freed
    /// until the event [`PieceUploads::mark`] records next has completed (or
    /// [`PieceUploads::wait`] has returned `Ok`).
    unsafe fn queue(&mut self, stage: &PinnedBlock, at: usize, len: usize) -> Result<()>;

    /// Records an event after every copy queued so far, and returns it.
    fn mark(&mut self) -> Result<Arc<dyn Fence>>;

    /// Waits on the host until every copy queued so far has completed.
    fn wait(&mut self) -> Result<()>;
}

/// Uploads `data` through one block of the pinned pool: the data is copied into the
/// block piece by piece (by the calling thread, and by up to `helpers` copy threads when
/// the knob says so), and each piece's copy is queued through `dma` as soon as the piece
/// is in the block, in order, from the calling thread. `data` may be dropped or changed
/// when this returns; the block goes back to the pool held until the copies' event.
pub(crate) fn upload_inline<Q: PieceUploads>(data: &[u8], dma: &mut Q) -> Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    let knobs = inline_upload();
    let piece = knobs.piece.max(MIN_PIECE);
    // `acquire` hands out a block only once every copy that used it has completed, and
    // no one else holds it: the block is this call's alone until it is dropped below.
    let stage = pinned::acquire(data.len())?;
    let plan = Arc::new(Plan::new(data, &stage, piece, knobs.nontemporal));
    // Helpers take pieces when they wake up; the calling thread never waits for one to
    // start (it copies every piece no helper has claimed), only for those copying when
    // it is done (`Plan::close`).
    let helpers = knobs.helpers.min(copy_threads().saturating_sub(1)).min(plan.count.saturating_sub(1));
    for _ in 0..helpers {
        let plan = Arc::clone(&plan);
        if !detach(Box::new(move || plan.help())) {
            break;
        }
    }
    let mut held = Held { stage: &stage, dma, queued: false, settled: false };
    let copied = plan.lead(&mut held);
    // `lead` closed the plan: no helper writes the block any more, and none will read
    // `data` again. The block goes back held until the DMAs that read it are done.
    held.settle(copied)
}

/// One inline upload's pieces, which the calling thread and its helpers claim in order.
/// The helpers reach the source and the block through addresses: they copy a piece only
/// while the plan is open, and the calling thread closes it, and waits for the helpers
/// inside a copy, before it returns (while both are alive).
struct Plan {
    src: usize,
    len: usize,
    /// The block's address.
    stage: usize,
    piece: usize,
    count: usize,
    nontemporal: bool,
    /// The next piece to claim.
    next: AtomicUsize,
    /// Which pieces are in the block.
    ready: Vec<AtomicBool>,
    /// Set by the calling thread when it is done: helpers claim nothing more.
    closed: AtomicBool,
    /// Helpers between their check of `closed` and the end of their copy.
    active: AtomicUsize,
    /// Set when a helper panicked (its piece never becomes ready).
    failed: AtomicBool,
}

impl Plan {
    fn new(src: &[u8], stage: &PinnedBlock, piece: usize, nontemporal: bool) -> Self {
        let count = src.len().div_ceil(piece);
        Plan {
            src: src.as_ptr() as usize,
            len: src.len(),
            stage: stage.ptr() as usize,
            piece,
            count,
            nontemporal,
            next: AtomicUsize::new(0),
            ready: (0..count).map(|_| AtomicBool::new(false)).collect(),
            closed: AtomicBool::new(false),
            active: AtomicUsize::new(0),
            failed: AtomicBool::new(false),
        }
    }

    /// Bytes `at .. at + len` of piece `i`.
    fn range(&self, i: usize) -> (usize, usize) {
        let at = i * self.piece;
        (at, self.piece.min(self.len - at))
    }

    /// Claims the next piece and copies it into the block; `false` when none is left.
    ///
    /// # Safety
    /// The source and the block are alive: called by the calling thread inside
    /// [`upload_inline`], or by a helper counted in `active` that saw the plan open
    /// after counting itself (the calling thread waits for it before returning).
    unsafe fn copy_next(&self) -> bool {
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        if i >= self.count {
            return false;
        }
        let (at, len) = self.range(i);
        let (dst, src) = ((self.stage + at) as *mut u8, (self.src + at) as *const u8);
        if self.nontemporal {
            // Both are alive (this fn's contract); the block holds at least
            // `self.len` bytes (acquired for them), so `at .. at + len` lies within it and
            // within the source; piece `i` is claimed by this thread alone, no DMA reads it
            // before it is marked ready below, and the block is pool memory, not the source.
            // SAFETY: for the reasons in the comment just above.
            unsafe { stream_copy(dst, src, len) };
        } else {
            // SAFETY: as above.
            unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        }
        self.ready[i].store(true, Ordering::Release);
        true
    }

    /// A helper's part: copies pieces until none is left or the plan is closed.
    fn help(&self) {
        loop {
            let _counted = Active::enter(self);
            if self.closed.load(Ordering::SeqCst) {
                return;
            }
            // SAFETY: counted in `active`, then saw the plan open: the calling thread
            // waits for this copy before it returns (`close`).
            if !unsafe { self.copy_next() } {
                return;
            }
        }
    }

    /// The calling thread's part: for each piece in order, once it is in the block
    /// (copied here, or by a helper), queues its DMA. Closes the plan when done.
    fn lead<Q: PieceUploads>(&self, held: &mut Held<'_, Q>) -> Result<()> {
        let done = self.lead_pieces(held);
        self.close();
        done
    }

    fn lead_pieces<Q: PieceUploads>(&self, held: &mut Held<'_, Q>) -> Result<()> {
        for i in 0..self.count {
            let mut spins = 0u32;
            while !self.ready[i].load(Ordering::Acquire) {
                if self.failed.load(Ordering::Acquire) {
                    return Err(Error::Panicked { message: "a helper of an inline upload panicked".into() });
                }
                // A piece still unclaimed is copied here; otherwise a helper is copying
                // piece `i` right now.
                // SAFETY: this is the calling thread, inside `upload_inline`.
                if !unsafe { self.copy_next() } {
                    spins += 1;
                    if spins < 64 {
                        std::hint::spin_loop();
                    } else {
                        std::thread::yield_now();
                    }
                }
            }
            let (at, len) = self.range(i);
            held.queued = true;
            // `at + len <= self.len`; piece `i` is in the block (its ready flag,
            // stored after the copy, was read with Acquire) and no thread writes it again
            // (each piece is claimed once). The block is neither written, reused nor freed
            // before the event `Held::settle` records after the last DMA: it goes back to
            // the pool held until that event, or is retired.
            // SAFETY: for the reasons in the comment just above.
            unsafe { held.dma.queue(held.stage, at, len)? };
        }
        Ok(())
    }

    /// Ends the helpers' part: none claims a piece after this, and those inside a copy
    /// have finished it when this returns.
    fn close(&self) {
        // With `Active::enter`'s SeqCst increment and load, either a helper sees the plan
        // closed, or this sees it counted and waits for it.
        self.closed.store(true, Ordering::SeqCst);
        let mut spins = 0u32;
        while self.active.load(Ordering::SeqCst) > 0 {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// A helper counted in [`Plan::active`] while it lives; a panic marks the plan failed.
struct Active<'a>(&'a Plan);

impl<'a> Active<'a> {
    fn enter(plan: &'a Plan) -> Self {
        plan.active.fetch_add(1, Ordering::SeqCst);
        Active(plan)
    }
}

impl Drop for Active<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.failed.store(true, Ordering::Release);
        }
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The block of an inline upload while its DMAs may be queued: settling it records the
/// event that holds it, or waits, or retires it.
struct Held<'a, Q: PieceUploads> {
    stage: &'a PinnedBlock,
    dma: &'a mut Q,
    /// Whether a DMA may have been queued (set just before each queue call).
    queued: bool,
    settled: bool,
}

impl<Q: PieceUploads> Held<'_, Q> {
    /// Holds the block until the DMAs queued so far are done; returns `copied`, or the
    /// error that kept the end of the DMAs from being marked.
    fn settle(mut self, copied: Result<()>) -> Result<()> {
        self.settled = true;
        if !self.queued {
            return copied;
        }
        match self.dma.mark() {
            Ok(event) => {
                self.stage.hold_until(event);
                copied
            }
            Err(e) => {
                // The DMAs' end is unmarked: wait for them, or never reuse the block.
                if self.dma.wait().is_err() {
                    self.stage.retire();
                }
                copied.and(Err(e))
            }
        }
    }
}

impl<Q: PieceUploads> Drop for Held<'_, Q> {
    fn drop(&mut self) {
        // Only reached unsettled by a panic between a queue and `settle`: the block must
        // still not go back while a DMA may read it.
        if !self.settled && self.queued && self.dma.wait().is_err() {
            self.stage.retire();
        }
    }
}

#[cfg(test)]
mod tests;
