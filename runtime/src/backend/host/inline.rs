//! The inline staged upload as the host backend models it: the same pipeline as on the
//! GPU (`upload::upload_inline`: one block of the pinned pool, filled piece by piece
//! on the calling thread), with each piece's DMA a job on the simulated device's current
//! stream that copies that piece of the block into the new buffer. The jobs run behind
//! the host, as DMAs do, so the pool's rule (no reuse of a block before its event) is
//! checked here as on the GPU: the hazard checker reports a block handed out again while
//! a job may still read it.

use std::sync::Arc;

use crate::backend::api::fence::Fence;
use crate::backend::host::buffer::{HostBuffer, Span};
use crate::backend::host::host;
use crate::backend::host::streams::{current_stream, use_on_stream, HostEvent, HostStream};
use crate::backend::pinned_pool::{InFlight, PinnedBlock};
use crate::backend::sync::hazard::{self, Kind, Region};
use crate::backend::transfer::download::{self, PieceDownloads};
use crate::backend::transfer::upload::{self, PieceUploads};
use crate::device_id::DeviceId;
use crate::error::Result;

/// `data` as a new buffer of the simulated device `device`, through the inline path.
pub(in crate::backend::host) fn upload(device: DeviceId, data: &[u8]) -> Result<HostBuffer> {
    let s = current_stream(device);
    let out = HostBuffer::alloc(host().account(device)?, data.len(), Some(Arc::clone(&s)))?;
    let mut dma = Pieces { s: &s, out: &out, booked: false };
    upload::upload_inline(data, &mut dma)?;
    out.mark_written();
    Ok(out)
}

/// `out.len()` bytes of the simulated device's buffer `src`, after its writer, into
/// `out`, through the inline path.
pub(in crate::backend::host) fn download(src: &HostBuffer, out: &mut [std::mem::MaybeUninit<u8>]) -> Result<()> {
    let s = current_stream(src.account.device);
    use_on_stream(src, &s)?;
    let mut dma = DownloadPieces { s: &s, src };
    download::download_inline(out, &mut dma)
}

/// The DMAs of one inline upload: jobs on `s` that write pieces of `out`.
struct Pieces<'a> {
    s: &'a Arc<HostStream>,
    out: &'a HostBuffer,
    /// Whether the host's write of the block is booked with the checker yet.
    booked: bool,
}

/// A job's hold on a piece of a pinned block: the address, and the pool's in-flight
/// count that keeps the block allocated while the job is queued.
struct StagePiece {
    addr: usize,
    len: usize,
    _keep: InFlight,
}

impl PieceUploads for Pieces<'_> {
    unsafe fn queue(&mut self, stage: &PinnedBlock, at: usize, len: usize) -> Result<()> {
        let region = || Region { track: stage.track(), device: DeviceId::Pinned, bytes: len, dtype: None };
        if !self.booked && hazard::enabled() {
            // The host filled the block before this job reads it (later pieces are other
            // bytes, which the checker does not tell apart: one booking stands for all).
            hazard::host_use(region(), Kind::Write, "an inline upload");
            self.booked = true;
        }
        let from = StagePiece { addr: stage.ptr() as usize + at, len, _keep: stage.in_flight() };
        let mut to: Span = self.out.span();
        let uses = [(region(), Kind::Read), (self.out.region(None), Kind::Write)];
        self.s.launch(
            "upload",
            &uses,
            Box::new(move || {
                // SAFETY: `from` is `len` bytes of the pinned block at offset `at`, which holds
                // the piece and is not written or reused before the event `mark` records after
                // this job (the trait's contract), and stays allocated while `_keep` lives.
                let piece = unsafe { std::slice::from_raw_parts(from.addr as *const u8, from.len) };
                // SAFETY: `to` is the new buffer, which only this upload's jobs write, in
                // stream order, each its own bytes; `at + len` is at most its length (the
                // trait's contract); nothing reads it before a later use on the stream.
                let out = unsafe { to.bytes_mut() };
                out[at..at + len].copy_from_slice(piece);
            }),
        )?;
        Ok(())
    }

    fn mark(&mut self) -> Result<Arc<dyn Fence>> {
        let done = Arc::new(HostEvent::default());
        done.record(self.s)?;
        Ok(done)
    }

    fn wait(&mut self) -> Result<()> {
        self.s.synchronize()
    }
}

/// The DMAs of one inline download: jobs on `s` that copy pieces of `src` into the block,
/// each followed by an event.
struct DownloadPieces<'a> {
    s: &'a Arc<HostStream>,
    src: &'a HostBuffer,
}

impl PieceDownloads for DownloadPieces<'_> {
    type Event = Arc<HostEvent>;

    unsafe fn queue(&mut self, stage: &PinnedBlock, at: usize, len: usize) -> Result<Arc<HostEvent>> {
        let region = Region { track: stage.track(), device: DeviceId::Pinned, bytes: len, dtype: None };
        let to = StagePiece { addr: stage.ptr() as usize + at, len, _keep: stage.in_flight() };
        let from: Span = self.src.span();
        let uses = [(self.src.region(None), Kind::Read), (region, Kind::Write)];
        self.s.launch(
            "download",
            &uses,
            Box::new(move || {
                // SAFETY: `to` is `len` bytes of the pinned block at offset `at`, which only this
                // job touches until the event recorded after it has completed (the trait's
                // contract), and stays allocated while `_keep` lives.
                let landing = unsafe { std::slice::from_raw_parts_mut(to.addr as *mut u8, to.len) };
                // SAFETY: `from` is the device buffer, written before this point of the
                // stream (the download waited for its writer) and not written while the
                // download's jobs run; `at + len` is at most its length (the contract).
                let src = unsafe { from.bytes() };
                landing.copy_from_slice(&src[at..at + len]);
            }),
        )?;
        let landed = Arc::new(HostEvent::default());
        landed.record(self.s)?;
        Ok(landed)
    }

    fn sync(&mut self, event: &Arc<HostEvent>) -> Result<()> {
        event.synchronize()
    }

    fn wait(&mut self) -> Result<()> {
        self.s.synchronize()
    }

    fn landed(&mut self, stage: &PinnedBlock) {
        if hazard::enabled() {
            // The host read every piece once its event completed (the checker does not
            // tell the pieces apart: one booking, after the last event, stands for all).
            let region = Region { track: stage.track(), device: DeviceId::Pinned, bytes: 1, dtype: None };
            hazard::host_use(region, Kind::Read, "an inline download");
        }
    }
}
