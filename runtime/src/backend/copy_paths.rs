//! Which way a copy between pageable host memory and a device goes, by its size, and the
//! inline staged upload that both backends build on.
//!
//! An upload takes one of three paths:
//! - **direct** (below the inline threshold): one copy from the pageable source, which
//!   the driver stages itself through its own small buffers;
//! - **inline** (from the inline threshold to the staged threshold): the calling thread
//!   copies the source into ONE block of the pinned pool in pieces and queues each
//!   piece's DMA on the op's stream right after copying it, so the DMA of a piece
//!   overlaps the copy of the next; one event after the last DMA holds the block;
//! - **staged** (from the staged threshold): the copy threads, each through pinned
//!   stages of its own, on the device's copy stream (`cuda/staged.rs`).
//!
//! A download is direct below its staged threshold and staged from it. `to_vec`,
//! `item` and `to::<Cpu>()` all download through the same choice.
//!
//! The thresholds are knobs, not constants, so that the GPU bench can force each path at
//! each size (`__private::set_upload_paths`, `__private::set_download_staged_min`) and
//! the defaults can be set from its `h2d_pageable_{direct,inline,staged}_*` and
//! `d2h_pageable_{direct,staged}_*` rows.
//!
//! The rule of the inline path is the pinned pool's: the block comes from
//! [`pinned::acquire`] (which hands out a block only once every copy that used it has
//! completed), and after the last DMA one event is recorded and the block is held until
//! it ([`PinnedBlock::hold_until`]) before it goes back; if that event cannot be
//! recorded the host waits for the stream, and if even that fails the block is retired.
//! Nothing here depends on a `Drop` of anything the caller holds.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::backend::copy_threads::{copy_threads, on_copiers};
use crate::backend::pinned_pool::{self as pinned, PinnedBlock};
use crate::backend::RawEvent;
use crate::error::Result;

/// The way an upload goes (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UploadPath {
    /// One copy from the pageable source, staged by the driver.
    Direct,
    /// Through one pinned block, in pieces, on the calling thread and the op's stream.
    Inline,
    /// Through the copy threads' pinned stages, on the device's copy stream.
    Staged,
}

/// The way a download goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DownloadPath {
    /// One copy into the pageable destination, staged by the driver.
    Direct,
    /// Through the copy threads' pinned stages.
    Staged,
}

/// Uploads from this size take the inline path by default. Below it the fixed costs of
/// the inline path (a pool block, one event) are a larger part of the copy than what
/// the overlap of copies and DMAs saves.
pub(crate) const INLINE_MIN: usize = 256 << 10;
/// Uploads from this size are staged through the copy threads by default (the
/// `h2d_pageable_*` rows of the GPU bench, docs/BENCHMARKS.md: the copy threads tie the
/// driver's own staging at 4 MiB and win above).
pub(crate) const UPLOAD_STAGED_MIN: usize = 4 << 20;
/// Downloads from this size are staged through the copy threads by default.
pub(crate) const DOWNLOAD_STAGED_MIN: usize = 4 << 20;
/// The inline path's defaults: pieces of 256 KiB (four of a 1 MiB copy), copied by the
/// calling thread alone with non-temporal stores.
pub(crate) const INLINE: InlineUpload = InlineUpload { piece: 256 << 10, helpers: 0, nontemporal: true };
/// The smallest piece the inline path cuts (a page): smaller knobs are raised to it.
const MIN_PIECE: usize = 4096;

static INLINE_FROM: AtomicUsize = AtomicUsize::new(INLINE_MIN);
static UPLOAD_STAGED_FROM: AtomicUsize = AtomicUsize::new(UPLOAD_STAGED_MIN);
static DOWNLOAD_STAGED_FROM: AtomicUsize = AtomicUsize::new(DOWNLOAD_STAGED_MIN);
static PIECE: AtomicUsize = AtomicUsize::new(INLINE.piece);
static HELPERS: AtomicUsize = AtomicUsize::new(INLINE.helpers);
static NONTEMPORAL: AtomicBool = AtomicBool::new(INLINE.nontemporal);

/// How the inline upload path cuts and copies (for the GPU bench, which measures each
/// setting; see `__private::set_inline_upload`).
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::__private::{default_inline_upload, set_inline_upload, InlineUpload};
/// let old = set_inline_upload(InlineUpload { piece: 128 << 10, helpers: 1, nontemporal: false });
/// assert_eq!(set_inline_upload(old).piece, 128 << 10);
/// assert_eq!(default_inline_upload().helpers, 0);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InlineUpload {
    /// Bytes per piece: one host copy and one DMA each (at least a page; smaller values
    /// are raised to 4096).
    pub piece: usize,
    /// Pool threads that copy pieces besides the calling thread (at most the copy
    /// threads' count less one; `0`: the calling thread alone). The calling thread
    /// queues every DMA, in order, as soon as its piece is in the block.
    pub helpers: usize,
    /// Copy with non-temporal stores (the destination is not read first and not kept in
    /// cache) rather than a plain `memcpy`.
    pub nontemporal: bool,
}

/// The path of an upload of `bytes` bytes under the current thresholds.
pub(crate) fn upload_path(bytes: usize) -> UploadPath {
    choose_upload(bytes, INLINE_FROM.load(Ordering::Relaxed), UPLOAD_STAGED_FROM.load(Ordering::Relaxed))
}

/// The path of a download of `bytes` bytes under the current threshold.
pub(crate) fn download_path(bytes: usize) -> DownloadPath {
    if bytes > 0 && bytes >= DOWNLOAD_STAGED_FROM.load(Ordering::Relaxed) {
        DownloadPath::Staged
    } else {
        DownloadPath::Direct
    }
}

/// Direct below `inline_min`, inline from it, staged from `staged_min` (which wins when
/// it is the lower one); nothing (direct) for no bytes.
fn choose_upload(bytes: usize, inline_min: usize, staged_min: usize) -> UploadPath {
    if bytes == 0 {
        UploadPath::Direct
    } else if bytes >= staged_min {
        UploadPath::Staged
    } else if bytes >= inline_min {
        UploadPath::Inline
    } else {
        UploadPath::Direct
    }
}

/// Sets the sizes from which uploads take the inline and the staged path; returns the
/// previous pair.
pub(crate) fn set_upload_paths(inline_min: usize, staged_min: usize) -> (usize, usize) {
    (INLINE_FROM.swap(inline_min, Ordering::Relaxed), UPLOAD_STAGED_FROM.swap(staged_min, Ordering::Relaxed))
}

/// Sets the size from which downloads are staged; returns the previous one.
pub(crate) fn set_download_staged_min(bytes: usize) -> usize {
    DOWNLOAD_STAGED_FROM.swap(bytes, Ordering::Relaxed)
}

/// Sets how the inline path cuts and copies; returns the previous setting.
pub(crate) fn set_inline_upload(k: InlineUpload) -> InlineUpload {
    InlineUpload {
        piece: PIECE.swap(k.piece, Ordering::Relaxed),
        helpers: HELPERS.swap(k.helpers, Ordering::Relaxed),
        nontemporal: NONTEMPORAL.swap(k.nontemporal, Ordering::Relaxed),
    }
}

/// How the inline path cuts and copies now.
pub(crate) fn inline_upload() -> InlineUpload {
    InlineUpload {
        piece: PIECE.load(Ordering::Relaxed),
        helpers: HELPERS.load(Ordering::Relaxed),
        nontemporal: NONTEMPORAL.load(Ordering::Relaxed),
    }
}

/// What the inline path needs of a backend: the DMA of one piece of the pinned block to
/// the same bytes of the destination, queued in stream order, and the event after them.
pub(crate) trait PieceCopies {
    /// Queues the copy of bytes `at .. at + len` of `stage` to bytes `at .. at + len` of
    /// the destination, after everything queued before on the destination's stream.
    ///
    /// # Safety
    /// `at + len` is at most the length of the upload; those bytes of `stage` hold the
    /// data now, and neither they nor the rest of `stage` are written, reused or freed
    /// until the event [`PieceCopies::mark`] records next has completed (or
    /// [`PieceCopies::wait`] has returned `Ok`).
    unsafe fn queue(&mut self, stage: &PinnedBlock, at: usize, len: usize) -> Result<()>;

    /// Records an event after every copy queued so far, and returns it.
    fn mark(&mut self) -> Result<RawEvent>;

    /// Waits on the host until every copy queued so far has completed.
    fn wait(&mut self) -> Result<()>;
}

/// Uploads `data` through one block of the pinned pool: the data is copied into the
/// block piece by piece (by the calling thread, and by `helpers` pool threads when the
/// knob says so), and each piece's copy is queued through `dma` as soon as the piece is
/// in the block, in order, from the calling thread. `data` may be dropped or changed
/// when this returns; the block goes back to the pool held until the copies' event.
pub(crate) fn upload_inline<Q: PieceCopies + Send>(data: &[u8], dma: &mut Q) -> Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    let knobs = inline_upload();
    let piece = knobs.piece.max(MIN_PIECE);
    // `acquire` hands out a block only once every copy that used it has completed, and
    // no one else holds it: the block is this call's alone until it is dropped below.
    let stage = pinned::acquire(data.len())?;
    let plan = Plan::new(data, &stage, piece, knobs.nontemporal);
    let mut held = Held { stage: &stage, dma, queued: false, settled: false };
    let helpers = knobs.helpers.min(copy_threads().saturating_sub(1)).min(plan.count.saturating_sub(1));
    let copied = if helpers == 0 {
        plan.lead(&mut held)
    } else {
        // The calling thread leads (copies and queues every DMA); the helpers only copy.
        let lead = Mutex::new(&mut held);
        let copied = on_copiers(1 + helpers, &|part| {
            if part == 0 {
                let mut h = lead.lock().unwrap_or_else(|p| p.into_inner());
                plan.lead(&mut h)
            } else {
                while plan.copy_next() {}
                Ok(())
            }
        });
        drop(lead);
        copied
    };
    // Every helper has returned (`on_copiers` waits for all parts): no one writes the
    // block any more; it is handed back below, held until the DMAs that read it are done.
    held.settle(copied)
}

/// One inline upload's pieces, which the calling thread and its helpers claim in order.
struct Plan<'a> {
    src: &'a [u8],
    /// The block's address, shared with the helper threads.
    stage: usize,
    piece: usize,
    count: usize,
    nontemporal: bool,
    /// The next piece to claim.
    next: AtomicUsize,
    /// Which pieces are in the block.
    ready: Vec<AtomicBool>,
    /// Set when the lead failed: the helpers stop claiming.
    stop: AtomicBool,
}

impl<'a> Plan<'a> {
    fn new(src: &'a [u8], stage: &PinnedBlock, piece: usize, nontemporal: bool) -> Self {
        let count = src.len().div_ceil(piece);
        Plan {
            src,
            stage: stage.ptr() as usize,
            piece,
            count,
            nontemporal,
            next: AtomicUsize::new(0),
            ready: (0..count).map(|_| AtomicBool::new(false)).collect(),
            stop: AtomicBool::new(false),
        }
    }

    /// Bytes `at .. at + len` of piece `i`.
    fn range(&self, i: usize) -> (usize, usize) {
        let at = i * self.piece;
        (at, self.piece.min(self.src.len() - at))
    }

    /// Claims the next piece and copies it into the block; `false` when none is left.
    fn copy_next(&self) -> bool {
        if self.stop.load(Ordering::Relaxed) {
            return false;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed);
        if i >= self.count {
            return false;
        }
        let (at, len) = self.range(i);
        let (dst, src) = ((self.stage + at) as *mut u8, self.src[at..at + len].as_ptr());
        if self.nontemporal {
            // SAFETY: the block holds at least `src.len()` bytes (acquired for them), so
            // `at .. at + len` lies within it and within the source; piece `i` is claimed
            // by this thread alone, no DMA reads it before it is marked ready below, and
            // the block is pool memory, not the source.
            unsafe { stream_copy(dst, src, len) };
        } else {
            // SAFETY: as above.
            unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        }
        self.ready[i].store(true, Ordering::Release);
        true
    }

    /// The calling thread's part: for each piece in order, once it is in the block
    /// (copied here, or by a helper), queues its DMA. On an error the helpers stop.
    fn lead<Q: PieceCopies>(&self, held: &mut Held<'_, Q>) -> Result<()> {
        let done = self.lead_pieces(held);
        if done.is_err() {
            self.stop.store(true, Ordering::Relaxed);
        }
        done
    }

    fn lead_pieces<Q: PieceCopies>(&self, held: &mut Held<'_, Q>) -> Result<()> {
        for i in 0..self.count {
            let mut spins = 0u32;
            while !self.ready[i].load(Ordering::Acquire) {
                // A piece still unclaimed is copied here; otherwise a helper is copying
                // piece `i` right now.
                if !self.copy_next() {
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
            // SAFETY: `at + len <= src.len()`; piece `i` is in the block (its ready flag,
            // stored after the copy, was read with Acquire) and no thread writes it again
            // (each piece is claimed once). The block is neither written, reused nor freed
            // before the event `Held::settle` records after the last DMA: it goes back to
            // the pool held until that event, or is retired.
            unsafe { held.dma.queue(held.stage, at, len)? };
        }
        Ok(())
    }
}

/// The block of an inline upload while its DMAs may be queued: settling it records the
/// event that holds it, or waits, or retires it.
struct Held<'a, Q: PieceCopies> {
    stage: &'a PinnedBlock,
    dma: &'a mut Q,
    /// Whether a DMA may have been queued (set just before each queue call).
    queued: bool,
    settled: bool,
}

impl<Q: PieceCopies> Held<'_, Q> {
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

impl<Q: PieceCopies> Drop for Held<'_, Q> {
    fn drop(&mut self) {
        // Only reached unsettled by a panic between a queue and `settle`: the block must
        // still not go back while a DMA may read it.
        if !self.settled && self.queued && self.dma.wait().is_err() {
            self.stage.retire();
        }
    }
}

/// Copies `len` bytes with non-temporal stores where the CPU has them: the destination
/// is not read first and not kept in cache, which saves a third of the memory traffic
/// of a plain copy (these copies are bound by memory bandwidth, not by the CPU).
///
/// # Safety
/// `src` and `dst` are valid for `len` bytes and do not overlap.
pub(crate) unsafe fn stream_copy(dst: *mut u8, src: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        // Align the destination to 16 bytes with a plain copy of the head.
        let head = dst.align_offset(16).min(len);
        // SAFETY: `head <= len`, so both ranges are within the caller's valid,
        // non-overlapping `len` bytes.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, head) };
        let body = (len - head) / 16;
        // SAFETY: `head <= len`: both offsets stay within (or one past) the `len` bytes.
        let (s, d) = unsafe { (src.add(head), dst.add(head)) };
        for i in 0..body {
            // SAFETY: `head + i * 16 + 16 <= head + body * 16 <= len`, so the 16 bytes read and written lie within
            // `src` and `dst`; `d + i * 16` is 16-byte aligned (`d` was aligned above), as `_mm_stream_si128` requires,
            // and the load is unaligned-tolerant. SSE2 is part of x86_64, so these need no feature check.
            unsafe {
                let v = _mm_loadu_si128(s.add(i * 16) as *const __m128i);
                _mm_stream_si128(d.add(i * 16) as *mut __m128i, v);
            }
        }
        // SAFETY: a store fence has no memory operands; SSE is part of x86_64. It orders the
        // non-temporal stores above before whatever the caller does next.
        unsafe { _mm_sfence() };
        let done = head + body * 16;
        // SAFETY: `done <= len`: the remaining `len - done` bytes of both ranges.
        unsafe { std::ptr::copy_nonoverlapping(src.add(done), dst.add(done), len - done) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the caller's contract: both valid for `len` bytes, not overlapping.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, len)
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend;
    use crate::device_id::DeviceId;
    use crate::error::Error;

    // The knobs are process-wide: the tests that set them run one at a time (other tests
    // of this binary may upload meanwhile; they only take another path), and each puts
    // the defaults back when it ends, by panic too.
    static KNOBS: Mutex<()> = Mutex::new(());

    struct Knobs(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);

    fn knobs() -> Knobs {
        Knobs(KNOBS.lock().unwrap_or_else(|p| p.into_inner()))
    }

    impl Drop for Knobs {
        fn drop(&mut self) {
            set_upload_paths(INLINE_MIN, UPLOAD_STAGED_MIN);
            set_download_staged_min(DOWNLOAD_STAGED_MIN);
            set_inline_upload(INLINE);
        }
    }

    #[test]
    fn each_size_takes_the_path_of_its_range() {
        let (x, y) = (256 << 10, 4 << 20);
        assert_eq!(choose_upload(0, x, y), UploadPath::Direct);
        assert_eq!(choose_upload(1, x, y), UploadPath::Direct);
        assert_eq!(choose_upload(x - 1, x, y), UploadPath::Direct);
        assert_eq!(choose_upload(x, x, y), UploadPath::Inline);
        assert_eq!(choose_upload(1 << 20, x, y), UploadPath::Inline);
        assert_eq!(choose_upload(y - 1, x, y), UploadPath::Inline);
        assert_eq!(choose_upload(y, x, y), UploadPath::Staged);
        assert_eq!(choose_upload(usize::MAX, x, y), UploadPath::Staged);
        // The staged threshold wins where it is the lower one; no bytes go nowhere.
        assert_eq!(choose_upload(x, y, x), UploadPath::Staged);
        assert_eq!(choose_upload(x - 1, y, x), UploadPath::Direct);
        assert_eq!(choose_upload(0, 0, 0), UploadPath::Direct);
        // The knobs that force one path at every size.
        for n in [1, 4096, 1 << 20, 1 << 30] {
            assert_eq!(choose_upload(n, usize::MAX, usize::MAX), UploadPath::Direct);
            assert_eq!(choose_upload(n, 0, usize::MAX), UploadPath::Inline);
            assert_eq!(choose_upload(n, 0, 0), UploadPath::Staged);
            assert_eq!(choose_upload(n, usize::MAX, 0), UploadPath::Staged);
        }
    }

    #[test]
    fn the_knobs_move_the_thresholds_and_give_back_the_old_ones() {
        let _k = knobs();
        assert_eq!(set_upload_paths(1000, 5000), (INLINE_MIN, UPLOAD_STAGED_MIN), "the defaults");
        assert_eq!(upload_path(999), UploadPath::Direct);
        assert_eq!(upload_path(1000), UploadPath::Inline);
        assert_eq!(upload_path(4999), UploadPath::Inline);
        assert_eq!(upload_path(5000), UploadPath::Staged);
        assert_eq!(set_upload_paths(INLINE_MIN, UPLOAD_STAGED_MIN), (1000, 5000));
        assert_eq!(upload_path(INLINE_MIN - 1), UploadPath::Direct);
        assert_eq!(upload_path(INLINE_MIN), UploadPath::Inline);
        assert_eq!(upload_path(1 << 20), UploadPath::Inline);
        assert_eq!(upload_path(UPLOAD_STAGED_MIN), UploadPath::Staged);

        assert_eq!(download_path(DOWNLOAD_STAGED_MIN - 1), DownloadPath::Direct);
        assert_eq!(download_path(DOWNLOAD_STAGED_MIN), DownloadPath::Staged);
        assert_eq!(set_download_staged_min(0), DOWNLOAD_STAGED_MIN);
        assert_eq!(download_path(1), DownloadPath::Staged);
        assert_eq!(download_path(0), DownloadPath::Direct, "nothing to stage");
        assert_eq!(set_download_staged_min(usize::MAX), 0);
        assert_eq!(download_path(1 << 30), DownloadPath::Direct);
        assert_eq!(set_download_staged_min(DOWNLOAD_STAGED_MIN), usize::MAX);

        let k = InlineUpload { piece: 4096, helpers: 3, nontemporal: false };
        assert_eq!(set_inline_upload(k), INLINE);
        assert_eq!(inline_upload(), k);
        assert_eq!(set_inline_upload(INLINE), k);
    }

    /// Copies as a backend would queue them, checking each piece is in the block when
    /// its copy is queued; it fails where told to.
    struct Mock<'a> {
        data: &'a [u8],
        queued: Vec<(usize, usize)>,
        fail_at: Option<usize>,
        mark_fails: bool,
        wait_fails: bool,
        marks: usize,
        waits: usize,
        stage: usize,
    }

    impl<'a> Mock<'a> {
        fn new(data: &'a [u8]) -> Self {
            Mock {
                data,
                queued: Vec::new(),
                fail_at: None,
                mark_fails: false,
                wait_fails: false,
                marks: 0,
                waits: 0,
                stage: 0,
            }
        }
    }

    fn failed(what: &str) -> Error {
        Error::InvalidArgument { op: "mock", reason: what.into() }
    }

    impl PieceCopies for Mock<'_> {
        unsafe fn queue(&mut self, stage: &PinnedBlock, at: usize, len: usize) -> Result<()> {
            assert_eq!(self.marks, 0, "a copy queued after the mark");
            self.stage = stage.ptr() as usize;
            if self.fail_at == Some(self.queued.len()) {
                return Err(failed("queue"));
            }
            // SAFETY: the trait's contract: bytes `at .. at + len` of the block hold the
            // piece now (what this checks) and no one writes them meanwhile.
            let piece = unsafe { std::slice::from_raw_parts(stage.ptr().add(at), len) };
            assert!(piece == &self.data[at..at + len], "piece at {at} ({len} bytes) queued before it was copied");
            self.queued.push((at, len));
            Ok(())
        }

        fn mark(&mut self) -> Result<RawEvent> {
            self.marks += 1;
            if self.mark_fails {
                return Err(failed("mark"));
            }
            backend::selected()?.new_event(DeviceId::Cuda(0), false)
        }

        fn wait(&mut self) -> Result<()> {
            self.waits += 1;
            if self.wait_fails {
                Err(failed("wait"))
            } else {
                Ok(())
            }
        }
    }

    fn pattern(len: usize, seed: usize) -> Vec<u8> {
        (0..len).map(|i| ((i * 31 + seed) % 251) as u8).collect()
    }

    #[test]
    fn every_piece_is_queued_in_order_right_after_it_is_in_the_block() -> Result<()> {
        let _k = knobs();
        let cases = [1, 4095, 4096, 4097, (64 << 10) + 3, (256 << 10) - 1, 256 << 10, (256 << 10) + 1, (1 << 20) + 77];
        for (seed, &len) in cases.iter().enumerate() {
            let data = pattern(len, seed);
            for piece in [1, 4096, 64 << 10, 256 << 10] {
                for helpers in [0, 1, 3] {
                    for nontemporal in [true, false] {
                        set_inline_upload(InlineUpload { piece, helpers, nontemporal });
                        let mut dma = Mock::new(&data);
                        let done = upload_inline(&data, &mut dma);
                        set_inline_upload(INLINE);
                        done?;
                        let piece = piece.max(MIN_PIECE);
                        let want: Vec<(usize, usize)> =
                            (0..len.div_ceil(piece)).map(|i| (i * piece, piece.min(len - i * piece))).collect();
                        assert_eq!(dma.queued, want, "{len} bytes in pieces of {piece}, {helpers} helpers");
                        assert_eq!((dma.marks, dma.waits), (1, 0), "one event after the last piece");
                    }
                }
            }
        }
        Ok(())
    }

    #[test]
    fn nothing_to_upload_takes_no_block_and_marks_nothing() -> Result<()> {
        let mut dma = Mock::new(&[]);
        upload_inline(&[], &mut dma)?;
        assert_eq!((dma.queued.len(), dma.marks, dma.waits), (0, 0, 0));
        Ok(())
    }

    #[test]
    fn a_failed_copy_stops_the_pieces_and_still_marks_those_queued() {
        let _k = knobs();
        let data = pattern(1 << 20, 7);
        for helpers in [0, 2] {
            for fail_at in [0, 2] {
                set_inline_upload(InlineUpload { helpers, ..INLINE });
                let mut dma = Mock::new(&data);
                dma.fail_at = Some(fail_at);
                let done = upload_inline(&data, &mut dma);
                set_inline_upload(INLINE);
                assert!(matches!(done, Err(Error::InvalidArgument { op: "mock", .. })), "{done:?}");
                assert_eq!(dma.queued.len(), fail_at, "no piece after the failed one");
                // Even the failed call may have queued its DMA: the block is held.
                assert_eq!((dma.marks, dma.waits), (1, 0));
            }
        }
    }

    #[test]
    fn an_unmarked_copy_is_waited_for_and_its_block_retired_when_that_fails_too() -> Result<()> {
        let _k = knobs();
        // A bin nothing else in these tests uses (4 MiB).
        let data = pattern((3 << 20) + 5, 3);
        let mut dma = Mock::new(&data);
        dma.mark_fails = true;
        let done = upload_inline(&data, &mut dma);
        assert!(matches!(done, Err(Error::InvalidArgument { reason, .. }) if reason == "mark"));
        assert_eq!((dma.marks, dma.waits), (1, 1), "the host waited for the unmarked copies");

        let mut dma = Mock::new(&data);
        dma.mark_fails = true;
        dma.wait_fails = true;
        assert!(upload_inline(&data, &mut dma).is_err());
        assert_eq!((dma.marks, dma.waits), (1, 1));
        // Retired: the pool never hands that block out again.
        let again: Vec<PinnedBlock> = (0..8).map(|_| pinned::acquire(data.len())).collect::<Result<_>>()?;
        assert!(again.iter().all(|b| b.ptr() as usize != dma.stage), "a block whose copy may run was reused");
        Ok(())
    }

    #[test]
    fn stream_copy_is_exact_at_any_length_and_alignment() {
        let src: Vec<u8> = (0..(1 << 20) + 77).map(|i| (i * 31 % 253) as u8).collect();
        for (off, len) in [(0, 0), (1, 15), (3, 4099), (7, 1 << 19), (0, (1 << 20) + 77)] {
            let len = len.min(src.len() - off);
            let mut dst = vec![0u8; len + 16];
            let at = off % 16;
            // SAFETY: `dst[at..]` has `len + 16 - at >= len` bytes and `src[off..]` has at
            // least `len` (clamped above); two distinct vectors.
            unsafe { stream_copy(dst[at..].as_mut_ptr(), src[off..].as_ptr(), len) };
            assert_eq!(&dst[at..at + len], &src[off..off + len], "offset {off}, length {len}");
        }
    }
}
