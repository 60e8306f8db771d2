//! The inline path's DMAs on the cuda backend (the piece loops are `transfer/upload.rs`
//! and `transfer/download.rs`, shared with the host backend): each piece of one pinned
//! block to or from the same bytes of device memory, on the op's own stream.

use std::sync::Arc;

use cudarc::driver::result;

use crate::backend::api::fence::Fence;
use crate::backend::cuda::driver::device::{dma, driver, DeviceState};
use crate::backend::cuda::driver::event::CudaEvent;
use crate::backend::cuda::driver::stream::CudaStream;
use crate::backend::cuda::driver::timing;
use crate::backend::pinned_pool::PinnedBlock;
use crate::backend::transfer::download::PieceDownloads;
use crate::backend::transfer::upload::PieceUploads;
use crate::error::Result;

/// The inline path's DMAs on the cuda backend: each piece of the pinned block straight
/// to the same bytes at `dst`, on the op's own stream, and one event after the last.
pub(in crate::backend::cuda) struct InlineDma<'a> {
    dev: &'a DeviceState,
    stream: &'a CudaStream,
    dst: u64,
    len: usize,
}

impl<'a> InlineDma<'a> {
    /// # Safety
    /// As `staged::upload` for `dst` and `len` bytes: `dst .. dst + len` lies within a live
    /// allocation of `dev` written only in `stream`'s order, and `dev`'s context is
    /// current on this thread.
    pub(in crate::backend::cuda) unsafe fn new(
        dev: &'a DeviceState,
        stream: &'a CudaStream,
        dst: u64,
        len: usize,
    ) -> Self {
        InlineDma { dev, stream, dst, len }
    }
}

impl PieceUploads for InlineDma<'_> {
    unsafe fn queue(&mut self, stage: &PinnedBlock, at: usize, len: usize) -> Result<()> {
        debug_assert!(at + len <= self.len);
        // SAFETY: the trait's contract: bytes `at .. at + len` of the pinned block hold the
        // piece, and the block stays unwritten and allocated until the event `mark` records
        // after this copy completes.
        let piece = unsafe { std::slice::from_raw_parts(stage.ptr().add(at), len) };
        let span = timing::begin(self.stream);
        // `at + len` is at most the upload's length (the trait's contract), so `dst + at` has `len` bytes within the
        // allocation `new`'s contract names, written in `stream`'s order like any op's output.
        // the source is page-locked pool memory that is neither written nor reused before this DMA's event
        // (see above), so the DMA may read it after this call returns.
        // SAFETY: as said just above.
        let r = dma(|| unsafe { result::memcpy_htod_async(self.dst + at as u64, piece, self.stream.raw.0) })
            .map_err(driver(self.dev.ordinal, "cuMemcpyHtoDAsync"));
        timing::finish(span, self.stream, &r, || timing::copy("HtoD", len, "inline"));
        r
    }

    fn mark(&mut self) -> Result<Arc<dyn Fence>> {
        let done = CudaEvent::create(self.dev.ordinal, self.dev.ctx.cu_ctx(), false)?;
        done.record(self.stream)?;
        Ok(Arc::new(done))
    }

    fn wait(&mut self) -> Result<()> {
        self.stream.synchronize()
    }
}

/// The inline path's DMAs of a download on the cuda backend: each piece of `src` into the
/// same bytes of the pinned block, on the op's own stream, each with its event.
pub(in crate::backend::cuda) struct InlineDownload<'a> {
    dev: &'a DeviceState,
    stream: &'a CudaStream,
    src: u64,
    len: usize,
}

impl<'a> InlineDownload<'a> {
    /// # Safety
    /// As `staged::download` for `src` and `len` bytes: `src .. src + len` lies within a live
    /// allocation of `dev`, written before this point of `stream`'s order and allocated
    /// until `stream`'s work queued now is done; `dev`'s context is current.
    pub(in crate::backend::cuda) unsafe fn new(
        dev: &'a DeviceState,
        stream: &'a CudaStream,
        src: u64,
        len: usize,
    ) -> Self {
        InlineDownload { dev, stream, src, len }
    }
}

impl PieceDownloads for InlineDownload<'_> {
    type Event = CudaEvent;

    unsafe fn queue(&mut self, stage: &PinnedBlock, at: usize, len: usize) -> Result<CudaEvent> {
        debug_assert!(at + len <= self.len);
        // SAFETY: the trait's contract: bytes `at .. at + len` of the pinned block are this
        // download's alone, unread and allocated until the event below has completed.
        let landing = unsafe { std::slice::from_raw_parts_mut(stage.ptr().add(at), len) };
        let span = timing::begin(self.stream);
        // `at + len` is at most the download's length (the trait's contract), so `src + at` has `len` bytes within the
        // allocation `new`'s contract names, ready on `stream` and allocated until its work is done.
        // the destination is page-locked pool memory that nothing else touches until this DMA's event
        // completes (see above), so the DMA may write it after this call returns.
        // SAFETY: as said just above.
        let r = dma(|| unsafe { result::memcpy_dtoh_async(landing, self.src + at as u64, self.stream.raw.0) })
            .map_err(driver(self.dev.ordinal, "cuMemcpyDtoHAsync"));
        timing::finish(span, self.stream, &r, || timing::copy("DtoH", len, "inline"));
        r?;
        let landed = CudaEvent::create(self.dev.ordinal, self.dev.ctx.cu_ctx(), false)?;
        landed.record(self.stream)?;
        Ok(landed)
    }

    fn sync(&mut self, event: &CudaEvent) -> Result<()> {
        event.synchronize()
    }

    fn wait(&mut self) -> Result<()> {
        self.stream.synchronize()
    }
}
