//! Knobs of the copy paths and the pool threads, for the GPU bench and the tests that
//! force one path. Not public API: `#[doc(hidden)]`, reached as `locus::tuning`. The
//! knobs themselves live in the backend (`backend/transfer/paths.rs`, `backend/workers/`); this module
//! only names them for code outside the crate.

use crate::backend::transfer::paths;
pub use crate::backend::transfer::paths::InlineUpload;

/// For the GPU bench and tests: sets the sizes from which pageable uploads
/// (`to::<Cuda<N>>()`, `from_slice`, checkpoint loads) take the inline path (one pinned
/// block, piece by piece, on the calling thread) and the staged path (the copy threads);
/// smaller ones go direct. Returns the previous `(inline_min, staged_min)`;
/// [`default_upload_paths`] are the sizes locus uses. `(usize::MAX, usize::MAX)` forces
/// direct, `(0, usize::MAX)` inline, `(0, 0)` staged. The cuda backend has all three
/// paths; the host backend models the inline one and copies plainly otherwise.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::tuning::{default_upload_paths, set_upload_paths};
/// let old = set_upload_paths(0, usize::MAX); // every upload inline
/// assert_eq!(set_upload_paths(old.0, old.1), (0, usize::MAX));
/// assert_eq!(default_upload_paths(), (64 << 10, 8 << 20));
/// ```
pub fn set_upload_paths(inline_min: usize, staged_min: usize) -> (usize, usize) {
    paths::set_upload_paths(inline_min, staged_min)
}

/// The sizes from which pageable uploads take the inline and the staged path, unless
/// changed by [`set_upload_paths`].
pub fn default_upload_paths() -> (usize, usize) {
    (paths::UPLOAD_INLINE_MIN, paths::UPLOAD_STAGED_MIN)
}

/// For the GPU bench and tests: sets the sizes from which downloads into pageable memory
/// (`to::<Cpu>()`, `to_vec`, `item`) take the inline path (one pinned block, every
/// piece's DMA queued at once, each piece copied out once it has landed) and the staged
/// path (the copy threads); smaller ones go direct, staged by the driver. Returns the
/// previous `(inline_min, staged_min)`; [`default_download_paths`] are the sizes locus
/// uses. The host backend models the inline path and copies plainly otherwise.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::tuning::{default_download_paths, set_download_paths};
/// let old = set_download_paths(usize::MAX, usize::MAX); // every download direct
/// assert_eq!(set_download_paths(old.0, old.1), (usize::MAX, usize::MAX));
/// assert_eq!(default_download_paths(), (1, 2 << 20));
/// ```
pub fn set_download_paths(inline_min: usize, staged_min: usize) -> (usize, usize) {
    paths::set_download_paths(inline_min, staged_min)
}

/// The sizes from which downloads take the inline and the staged path, unless changed
/// by [`set_download_paths`].
pub fn default_download_paths() -> (usize, usize) {
    (paths::DOWNLOAD_INLINE_MIN, paths::DOWNLOAD_STAGED_MIN)
}

/// For the GPU bench and tests: sets how the inline upload path cuts and copies
/// (see [`InlineUpload`]); returns the previous setting.
pub fn set_inline_upload(knobs: InlineUpload) -> InlineUpload {
    paths::set_inline_upload(knobs)
}

/// How the inline upload path cuts and copies unless changed (see `backend/transfer/paths.rs`).
pub fn default_inline_upload() -> InlineUpload {
    paths::INLINE_UPLOAD
}

/// For the GPU bench: sets how long a pool thread (the copy threads, the inline upload's
/// helpers, the host backend's workers) watches for the next job after one before it
/// sleeps, and returns the previous watch. A job queued within the watch starts at
/// once; a sleeping thread takes a wake-up first. [`default_pool_spin`] is what locus
/// uses.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use std::time::Duration;
/// use locus::tuning::set_pool_spin;
/// let old = set_pool_spin(Duration::ZERO); // sleep at once
/// assert_eq!(set_pool_spin(old), Duration::ZERO);
/// ```
pub fn set_pool_spin(spin: std::time::Duration) -> std::time::Duration {
    crate::backend::workers::set_pool_spin(spin)
}

/// The pool threads' watch unless changed: 200 µs, or none on a machine of 4 cores or
/// fewer (where a watching thread takes a core the work needs).
pub fn default_pool_spin() -> std::time::Duration {
    crate::backend::workers::default_pool_spin()
}

/// For the GPU bench and tests: sets the inline download's piece size in bytes (one DMA
/// and one event each; at least 4096), returning the previous one.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::tuning::{default_inline_download_piece, set_inline_download_piece};
/// let old = set_inline_download_piece(64 << 10);
/// assert_eq!(set_inline_download_piece(old), 64 << 10);
/// assert_eq!(default_inline_download_piece(), 256 << 10);
/// ```
pub fn set_inline_download_piece(bytes: usize) -> usize {
    paths::set_inline_download_piece(bytes)
}

/// The inline download's piece size unless changed: 256 KiB.
pub fn default_inline_download_piece() -> usize {
    paths::INLINE_DOWNLOAD_PIECE
}
