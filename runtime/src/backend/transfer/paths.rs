//! Which way a copy between pageable host memory and a device goes, by its size.
//!
//! A copy takes one of three paths:
//! - **direct** (below the inline threshold): one copy from or into the pageable
//!   memory, which the driver stages itself through its own small buffers;
//! - **inline** (from the inline threshold to the staged threshold): through ONE block
//!   of the pinned pool, in pieces, on the calling thread and the op's stream
//!   (`upload.rs`): an upload copies each piece into the block and queues its DMA
//!   right after, so the DMA of a piece overlaps the copy of the next; a download queues
//!   every piece's DMA at once and copies each piece out as soon as its event completes;
//! - **staged** (from the staged threshold): the copy threads, each through pinned
//!   stages of its own, on the device's copy stream (`cuda/staged.rs`).
//!
//! `to_vec`, `item` and `to::<Cpu>()` all download by the same choice; `to::<Cuda<N>>()`,
//! `from_slice` and checkpoint loads all upload by it.
//!
//! The thresholds are knobs, not constants, so that the GPU bench can force each path at
//! each size (`locus::tuning::set_upload_paths`, `locus::tuning::set_download_paths`) and the
//! defaults can be chosen from its `h2d_pageable_{direct,inline,staged}_*` and
//! `d2h_pageable_{direct,inline,staged}_*` rows.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// The way a copy goes (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CopyPath {
    /// One copy from or into the pageable memory, staged by the driver.
    Direct,
    /// Through one pinned block, in pieces, on the calling thread and the op's stream.
    Inline,
    /// Through the copy threads' pinned stages, on the device's copy stream.
    Staged,
}

// The defaults below come from the forced-path rows of the GPU bench on the H200
// (`gpu copies`, 3 runs, 2026-12-04, docs/BENCHMARKS.md "Pageable copies by path,
// session 30"), medians across runs in GB/s, direct / inline / staged:
//   upload    4K: 0.52 / 0.44 / 0.40 | 16K: 1.54 / 1.08 / 1.02 | 64K: 2.68 / 4.86 / 4.47
//             128K: 7.41 / 7.25 / 6.82 | 256K: 9.52 / 9.73 / 9.29 | 512K: 11.45 / 14.12 /
//             10.70 | 1M: 12.99 / 15.79 / 12.58 | 2M: 14.11 / 22.96 / 17.60 | 4M: 13.84 /
//             25.81 / 23.00 | 16M: 14.84 / 31.62 / 33.86
//   download  4K: 0.51 / 0.55 / 0.40 | 16K: 1.78 / 1.97 / 1.44 | 64K: 3.86 / 5.22 / 3.85
//             128K: 6.41 / 7.23 / 5.30 | 256K: 8.03 / 9.91 / 7.49 | 512K: 9.33 / 11.80 /
//             9.06 | 1M: 10.02 / 13.14 / 9.53 | 2M: 11.83 / 10.54 / 10.57 | 4M: 13.54 /
//             10.79 / 15.32 | 16M: 14.29 / 10.75 / 25.30

/// Uploads from this size take the inline path by default: at 64 KiB it is 4.9 GB/s
/// against 2.7 for the driver's own staging, within 2% of it at 128 and 256 KiB, and
/// faster from 512 KiB (15.8 against 13.0 at 1 MiB); below 64 KiB the direct path wins.
pub(crate) const UPLOAD_INLINE_MIN: usize = 64 << 10;
/// Uploads from this size are staged through the copy threads by default: at 4 MiB the
/// inline path still wins (25.8 against 23.0 GB/s), at 16 MiB the copy threads do (33.9
/// against 31.6); between the two the bench has no row, and the next power of two is
/// the cut.
pub(crate) const UPLOAD_STAGED_MIN: usize = 8 << 20;
/// Downloads take the inline path from this size by default, that is always: it wins at
/// every size the bench has, from an `item()` (7.7 against 8.0 µs a call, 3 runs of the
/// `item_roundtrip_{direct,inline}` rows) and 4 KiB (0.55 against 0.51 GB/s) to 1 MiB
/// (13.1 against 10.0).
pub(crate) const DOWNLOAD_INLINE_MIN: usize = 1;
/// Downloads from this size are staged through the copy threads by default: from 2 MiB
/// the inline path loses to the direct one, and staging is within 11% of direct at
/// 2 MiB and wins from 4 MiB (15.3 against 13.5, and 25.3 against 14.3 at 16 MiB).
pub(crate) const DOWNLOAD_STAGED_MIN: usize = 2 << 20;
/// The inline upload's defaults: pieces of 256 KiB (four of a 1 MiB copy), copied by
/// the calling thread and two pool threads, with non-temporal stores (the
/// `h2d_pageable_inline_p*_h*` rows: one to four helpers are within noise of each other
/// at 1 MiB, 14.3 to 17.0 GB/s, and two or three the fastest at 4 MiB, 26.9 and 27.8).
pub(crate) const INLINE_UPLOAD: InlineUpload = InlineUpload { piece: 256 << 10, helpers: 2, nontemporal: true };
/// The inline download's default piece: 256 KiB.
pub(crate) const INLINE_DOWNLOAD_PIECE: usize = 256 << 10;
/// The smallest piece the inline path cuts (a page): smaller knobs are raised to it.
pub(crate) const MIN_PIECE: usize = 4096;

static UPLOAD_INLINE_FROM: AtomicUsize = AtomicUsize::new(UPLOAD_INLINE_MIN);
static UPLOAD_STAGED_FROM: AtomicUsize = AtomicUsize::new(UPLOAD_STAGED_MIN);
static DOWNLOAD_INLINE_FROM: AtomicUsize = AtomicUsize::new(DOWNLOAD_INLINE_MIN);
static DOWNLOAD_STAGED_FROM: AtomicUsize = AtomicUsize::new(DOWNLOAD_STAGED_MIN);
static PIECE: AtomicUsize = AtomicUsize::new(INLINE_UPLOAD.piece);
static HELPERS: AtomicUsize = AtomicUsize::new(INLINE_UPLOAD.helpers);
static NONTEMPORAL: AtomicBool = AtomicBool::new(INLINE_UPLOAD.nontemporal);
static DOWNLOAD_PIECE: AtomicUsize = AtomicUsize::new(INLINE_DOWNLOAD_PIECE);

/// How the inline upload path cuts and copies (for the GPU bench, which measures each
/// setting; see `locus::tuning::set_inline_upload`).
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::tuning::{default_inline_upload, set_inline_upload, InlineUpload};
/// let old = set_inline_upload(InlineUpload { piece: 128 << 10, helpers: 1, nontemporal: false });
/// assert_eq!(set_inline_upload(old).piece, 128 << 10);
/// assert_eq!(default_inline_upload().helpers, 2);
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
pub(crate) fn upload_path(bytes: usize) -> CopyPath {
    choose(bytes, UPLOAD_INLINE_FROM.load(Ordering::Relaxed), UPLOAD_STAGED_FROM.load(Ordering::Relaxed))
}

/// The path of a download of `bytes` bytes under the current thresholds.
pub(crate) fn download_path(bytes: usize) -> CopyPath {
    choose(bytes, DOWNLOAD_INLINE_FROM.load(Ordering::Relaxed), DOWNLOAD_STAGED_FROM.load(Ordering::Relaxed))
}

/// Direct below `inline_min`, inline from it, staged from `staged_min` (which wins where
/// it is the lower one); direct for no bytes, which need no copy.
fn choose(bytes: usize, inline_min: usize, staged_min: usize) -> CopyPath {
    if bytes == 0 {
        CopyPath::Direct
    } else if bytes >= staged_min {
        CopyPath::Staged
    } else if bytes >= inline_min {
        CopyPath::Inline
    } else {
        CopyPath::Direct
    }
}

/// Sets the sizes from which uploads take the inline and the staged path; returns the
/// previous pair.
pub(crate) fn set_upload_paths(inline_min: usize, staged_min: usize) -> (usize, usize) {
    (UPLOAD_INLINE_FROM.swap(inline_min, Ordering::Relaxed), UPLOAD_STAGED_FROM.swap(staged_min, Ordering::Relaxed))
}

/// Sets the sizes from which downloads take the inline and the staged path; returns the
/// previous pair.
pub(crate) fn set_download_paths(inline_min: usize, staged_min: usize) -> (usize, usize) {
    (DOWNLOAD_INLINE_FROM.swap(inline_min, Ordering::Relaxed), DOWNLOAD_STAGED_FROM.swap(staged_min, Ordering::Relaxed))
}

/// Sets how the inline upload cuts and copies; returns the previous setting.
pub(crate) fn set_inline_upload(k: InlineUpload) -> InlineUpload {
    InlineUpload {
        piece: PIECE.swap(k.piece, Ordering::Relaxed),
        helpers: HELPERS.swap(k.helpers, Ordering::Relaxed),
        nontemporal: NONTEMPORAL.swap(k.nontemporal, Ordering::Relaxed),
    }
}

/// How the inline upload cuts and copies now.
pub(crate) fn inline_upload() -> InlineUpload {
    InlineUpload {
        piece: PIECE.load(Ordering::Relaxed),
        helpers: HELPERS.load(Ordering::Relaxed),
        nontemporal: NONTEMPORAL.load(Ordering::Relaxed),
    }
}

/// Sets the inline download's piece size; returns the previous one.
pub(crate) fn set_inline_download_piece(bytes: usize) -> usize {
    DOWNLOAD_PIECE.swap(bytes, Ordering::Relaxed)
}

/// The inline download's piece size now.
pub(crate) fn inline_download_piece() -> usize {
    DOWNLOAD_PIECE.load(Ordering::Relaxed)
}

#[cfg(test)]
pub(crate) mod tests {
    use crate::backend::transfer::paths::*;
    use std::sync::Mutex;

    // The knobs are process-wide: the tests that set them run one at a time (other tests
    // of this binary may copy meanwhile; they only take another path), and each puts
    // the defaults back when it ends, by panic too.
    static KNOBS: Mutex<()> = Mutex::new(());

    pub(crate) struct Knobs(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);

    /// Holds the knobs for one test; they are the defaults again when it drops.
    pub(crate) fn knobs() -> Knobs {
        Knobs(KNOBS.lock().unwrap_or_else(|p| p.into_inner()))
    }

    impl Drop for Knobs {
        fn drop(&mut self) {
            set_upload_paths(UPLOAD_INLINE_MIN, UPLOAD_STAGED_MIN);
            set_download_paths(DOWNLOAD_INLINE_MIN, DOWNLOAD_STAGED_MIN);
            set_inline_upload(INLINE_UPLOAD);
            set_inline_download_piece(INLINE_DOWNLOAD_PIECE);
        }
    }

    #[test]
    fn each_size_takes_the_path_of_its_range() {
        let (x, y) = (256 << 10, 4 << 20);
        assert_eq!(choose(0, x, y), CopyPath::Direct);
        assert_eq!(choose(1, x, y), CopyPath::Direct);
        assert_eq!(choose(x - 1, x, y), CopyPath::Direct);
        assert_eq!(choose(x, x, y), CopyPath::Inline);
        assert_eq!(choose(1 << 20, x, y), CopyPath::Inline);
        assert_eq!(choose(y - 1, x, y), CopyPath::Inline);
        assert_eq!(choose(y, x, y), CopyPath::Staged);
        assert_eq!(choose(usize::MAX, x, y), CopyPath::Staged);
        // The staged threshold wins where it is the lower one; no bytes need no copy.
        assert_eq!(choose(x, y, x), CopyPath::Staged);
        assert_eq!(choose(x - 1, y, x), CopyPath::Direct);
        assert_eq!(choose(0, 0, 0), CopyPath::Direct);
        // The knobs that force one path at every size.
        for n in [1, 4096, 1 << 20, 1 << 30] {
            assert_eq!(choose(n, usize::MAX, usize::MAX), CopyPath::Direct);
            assert_eq!(choose(n, 0, usize::MAX), CopyPath::Inline);
            assert_eq!(choose(n, 0, 0), CopyPath::Staged);
            assert_eq!(choose(n, usize::MAX, 0), CopyPath::Staged);
        }
    }

    #[test]
    fn the_knobs_move_the_thresholds_and_give_back_the_old_ones() {
        let _k = knobs();
        assert_eq!(set_upload_paths(1000, 5000), (UPLOAD_INLINE_MIN, UPLOAD_STAGED_MIN), "the defaults");
        assert_eq!(upload_path(999), CopyPath::Direct);
        assert_eq!(upload_path(1000), CopyPath::Inline);
        assert_eq!(upload_path(4999), CopyPath::Inline);
        assert_eq!(upload_path(5000), CopyPath::Staged);
        assert_eq!(set_upload_paths(UPLOAD_INLINE_MIN, UPLOAD_STAGED_MIN), (1000, 5000));
        // The defaults: direct below 64 KiB, inline to 8 MiB, staged from there.
        assert_eq!(upload_path(UPLOAD_INLINE_MIN - 1), CopyPath::Direct);
        assert_eq!(upload_path(UPLOAD_INLINE_MIN), CopyPath::Inline);
        assert_eq!(upload_path(1 << 20), CopyPath::Inline);
        assert_eq!(upload_path(UPLOAD_STAGED_MIN - 1), CopyPath::Inline);
        assert_eq!(upload_path(UPLOAD_STAGED_MIN), CopyPath::Staged);

        // Downloads: inline to 2 MiB, staged from there.
        assert_eq!(download_path(4), CopyPath::Inline, "an item()");
        assert_eq!(download_path(1 << 20), CopyPath::Inline);
        assert_eq!(download_path(DOWNLOAD_STAGED_MIN - 1), CopyPath::Inline);
        assert_eq!(download_path(DOWNLOAD_STAGED_MIN), CopyPath::Staged);
        assert_eq!(set_download_paths(2000, 0), (DOWNLOAD_INLINE_MIN, DOWNLOAD_STAGED_MIN));
        assert_eq!(download_path(1), CopyPath::Staged);
        assert_eq!(download_path(0), CopyPath::Direct, "nothing to stage");
        assert_eq!(set_download_paths(2000, usize::MAX), (2000, 0));
        assert_eq!(download_path(1999), CopyPath::Direct);
        assert_eq!(download_path(1 << 30), CopyPath::Inline);
        assert_eq!(set_download_paths(DOWNLOAD_INLINE_MIN, DOWNLOAD_STAGED_MIN), (2000, usize::MAX));

        let k = InlineUpload { piece: 4096, helpers: 3, nontemporal: false };
        assert_eq!(set_inline_upload(k), INLINE_UPLOAD);
        assert_eq!(inline_upload(), k);
        assert_eq!(set_inline_upload(INLINE_UPLOAD), k);
        assert_eq!(set_inline_download_piece(8192), INLINE_DOWNLOAD_PIECE);
        assert_eq!(inline_download_piece(), 8192);
        assert_eq!(set_inline_download_piece(INLINE_DOWNLOAD_PIECE), 8192);
    }
}
