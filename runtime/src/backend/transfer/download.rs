//! The inline path of a download from a device into pageable memory: ONE block of the
//! pinned pool, cut into pieces, on the calling thread and the op's stream (which copies
//! take it: `paths`; the upload is `upload`). Every piece's DMA into the block
//! is queued at once, each with its event, and each piece is copied out as soon as its
//! event has completed, while the later DMAs run. The cuda backend queues real DMAs
//! (`cuda/staged.rs`), the host backend jobs on a simulated stream (`host/inline.rs`).
//!
//! The rule is the pinned pool's: the block comes from [`pinned::acquire`], which hands
//! out a block only once every copy that used it has completed, and a download returns
//! only once every DMA into its block has completed; when it stops early it waits for
//! the stream, or retires the block. Nothing here depends on a `Drop` of anything the
//! caller holds.

use std::mem::MaybeUninit;

use crate::backend::pinned_pool::{self as pinned, PinnedBlock};
use crate::backend::transfer::paths::{inline_download_piece, MIN_PIECE};
use crate::backend::transfer::write_bytes;
use crate::error::Result;

/// What the inline download needs of a backend: the DMA of one piece of the source into
/// the same bytes of the pinned block, with an event after it, and waits for them.
pub(crate) trait PieceDownloads {
    /// The event after a piece's DMA.
    type Event;

    /// Queues the copy of bytes `at .. at + len` of the source to bytes `at .. at + len`
    /// of `stage`, after everything queued before on the source's stream, and an event
    /// after it; returns that event.
    ///
    /// # Safety
    /// `at + len` is at most the length of the download, and those bytes of `stage` are
    /// neither read nor written by anything else, nor is `stage` reused or freed, until
    /// that event has completed (or [`PieceDownloads::wait`] has returned `Ok`).
    unsafe fn queue(&mut self, stage: &PinnedBlock, at: usize, len: usize) -> Result<Self::Event>;

    /// Waits on the host until `event`, returned by [`PieceDownloads::queue`], has
    /// completed.
    fn sync(&mut self, event: &Self::Event) -> Result<()>;

    /// Waits on the host until every copy queued so far has completed.
    fn wait(&mut self) -> Result<()>;

    /// Called once every piece is in `out`: the host has read all of `stage`.
    fn landed(&mut self, _stage: &PinnedBlock) {}
}

/// Downloads into `out` through one block of the pinned pool: every piece's DMA is
/// queued at once, and each piece is copied out as soon as its event has completed.
/// Returns once `out` holds the data and no DMA uses the block any more.
pub(crate) fn download_inline<Q: PieceDownloads>(out: &mut [MaybeUninit<u8>], dma: &mut Q) -> Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    let piece = inline_download_piece().max(MIN_PIECE);
    // `acquire` hands out a block only once every copy that used it has completed, and
    // no one else holds it: the block is this call's alone until it is dropped below.
    let stage = pinned::acquire(out.len())?;
    let mut settle = Settle { stage: &stage, dma, done: false };
    let landed = land(out, piece, &mut settle);
    if landed.is_ok() {
        // Every event has completed: no DMA uses the block, which goes back idle.
        settle.done = true;
        settle.dma.landed(&stage);
    }
    landed
}

/// Queues every piece's DMA, then copies each piece out once its event has completed.
fn land<Q: PieceDownloads>(out: &mut [MaybeUninit<u8>], piece: usize, settle: &mut Settle<'_, Q>) -> Result<()> {
    let total = out.len();
    let count = total.div_ceil(piece);
    let range = |i: usize| (i * piece, piece.min(total - i * piece));
    let mut events = Vec::with_capacity(count);
    for i in 0..count {
        let (at, len) = range(i);
        // `at + len <= out.len()`, the length of the download. The block is this
        // call's alone (from `acquire`), read only below after the piece's event has
        // completed, and goes back only once every event has (or after `Settle` waited
        // for the stream, or retired it).
        // SAFETY: for the reasons in the comment just above.
        events.push(unsafe { settle.dma.queue(settle.stage, at, len)? });
    }
    for (i, event) in events.iter().enumerate() {
        settle.dma.sync(event)?;
        let (at, len) = range(i);
        // The piece's DMA has completed (its event, synced just above), so bytes
        // `at .. at + len` of the block hold it and nothing writes them any more; they lie
        // within the block (acquired for `out.len()` bytes) and within `out`, which is
        // not pool memory.
        // SAFETY: for the reasons in the comment just above.
        let landed = unsafe { std::slice::from_raw_parts(settle.stage.ptr().add(at), len) };
        write_bytes(&mut out[at..at + len], landed);
    }
    Ok(())
}

/// The block of an inline download until its DMAs are known to be done: if the download
/// stops early, the host waits for the stream, or the block is retired.
struct Settle<'a, Q: PieceDownloads> {
    stage: &'a PinnedBlock,
    dma: &'a mut Q,
    done: bool,
}

impl<Q: PieceDownloads> Drop for Settle<'_, Q> {
    fn drop(&mut self) {
        // A piece's DMA may still be queued (an error, or a panic, stopped the download).
        if !self.done && self.dma.wait().is_err() {
            self.stage.retire();
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::transfer::as_uninit;
    use crate::backend::transfer::download::*;
    use crate::backend::transfer::paths::set_inline_download_piece;
    use crate::backend::transfer::paths::tests::knobs;
    use crate::error::Error;

    fn failed(what: &str) -> Error {
        Error::InvalidArgument { op: "mock", reason: what.into() }
    }

    fn pattern(len: usize, seed: usize) -> Vec<u8> {
        (0..len).map(|i| ((i * 31 + seed) % 251) as u8).collect()
    }

    /// DMAs of a download as a backend would queue them: a piece lands in the block only
    /// when its event is synced (the latest a real DMA may land), so copying a piece out
    /// early reads the wrong bytes; it fails where told to.
    struct Landing<'a> {
        data: &'a [u8],
        queued: Vec<(usize, usize)>,
        synced: usize,
        fail_queue_at: Option<usize>,
        fail_sync_at: Option<usize>,
        wait_fails: bool,
        waits: usize,
        landed: usize,
        stage: usize,
    }

    impl<'a> Landing<'a> {
        fn new(data: &'a [u8]) -> Self {
            Landing {
                data,
                queued: Vec::new(),
                synced: 0,
                fail_queue_at: None,
                fail_sync_at: None,
                wait_fails: false,
                waits: 0,
                landed: 0,
                stage: 0,
            }
        }
    }

    impl PieceDownloads for Landing<'_> {
        type Event = ();

        unsafe fn queue(&mut self, stage: &PinnedBlock, at: usize, len: usize) -> Result<()> {
            self.stage = stage.ptr() as usize;
            if self.fail_queue_at == Some(self.queued.len()) {
                return Err(failed("queue"));
            }
            assert_eq!(self.synced, 0, "a DMA queued after the host began waiting");
            self.queued.push((at, len));
            Ok(())
        }

        fn sync(&mut self, _event: &()) -> Result<()> {
            if self.fail_sync_at == Some(self.synced) {
                return Err(failed("sync"));
            }
            let (at, len) = self.queued[self.synced];
            // SAFETY: `at .. at + len` lies within the block (the trait's contract) and the
            // host reads it only once this returns: the DMA's write.
            let landing = unsafe { std::slice::from_raw_parts_mut((self.stage + at) as *mut u8, len) };
            landing.copy_from_slice(&self.data[at..at + len]);
            self.synced += 1;
            Ok(())
        }

        fn wait(&mut self) -> Result<()> {
            self.waits += 1;
            if self.wait_fails {
                Err(failed("wait"))
            } else {
                Ok(())
            }
        }

        fn landed(&mut self, _stage: &PinnedBlock) {
            self.landed += 1;
        }
    }

    #[test]
    fn every_piece_is_queued_at_once_and_copied_out_once_it_has_landed() -> Result<()> {
        let _k = knobs();
        for (seed, len) in [1, 4095, 4097, (256 << 10) + 1, (1 << 20) + 77].into_iter().enumerate() {
            let data = pattern(len, seed);
            for piece in [1, 4096, 64 << 10, 256 << 10] {
                set_inline_download_piece(piece);
                let mut dma = Landing::new(&data);
                let mut out = vec![0u8; len];
                // SAFETY: a download writes only initialized bytes through the view (its contract).
                let view = unsafe { as_uninit(&mut out) };
                download_inline(view, &mut dma)?;
                assert!(out == data, "{len} bytes in pieces of {piece}: the bytes differ");
                let piece = piece.max(MIN_PIECE);
                let want: Vec<(usize, usize)> =
                    (0..len.div_ceil(piece)).map(|i| (i * piece, piece.min(len - i * piece))).collect();
                assert_eq!(dma.queued, want);
                assert_eq!((dma.synced, dma.waits, dma.landed), (want.len(), 0, 1));
            }
        }
        let mut dma = Landing::new(&[]);
        download_inline(&mut [], &mut dma)?;
        assert_eq!((dma.queued.len(), dma.landed), (0, 0), "nothing to download takes no block");
        Ok(())
    }

    #[test]
    fn a_download_that_stops_early_waits_for_its_dmas_or_retires_the_block() -> Result<()> {
        let _k = knobs();
        let data = pattern((1 << 20) + 5, 9);
        let mut out = vec![0u8; data.len()];
        let mut dma = Landing::new(&data);
        dma.fail_queue_at = Some(2);
        // SAFETY: a download writes only initialized bytes through the view (its contract).
        let view = unsafe { as_uninit(&mut out) };
        assert!(download_inline(view, &mut dma).is_err());
        assert_eq!((dma.queued.len(), dma.waits, dma.landed), (2, 1, 0), "the queued DMAs are waited for");

        let mut dma = Landing::new(&data);
        dma.fail_sync_at = Some(1);
        // SAFETY: a download writes only initialized bytes through the view (its contract).
        let view = unsafe { as_uninit(&mut out) };
        assert!(download_inline(view, &mut dma).is_err());
        assert_eq!((dma.synced, dma.waits, dma.landed), (1, 1, 0));
        assert!(out[..256 << 10] == data[..256 << 10], "the piece that landed was copied out");

        // A bin nothing else in these tests uses (8 MiB): retired, never handed out again.
        let data = pattern((5 << 20) + 1, 4);
        let mut out = vec![0u8; data.len()];
        let mut dma = Landing::new(&data);
        dma.fail_sync_at = Some(0);
        dma.wait_fails = true;
        // SAFETY: a download writes only initialized bytes through the view (its contract).
        let view = unsafe { as_uninit(&mut out) };
        assert!(download_inline(view, &mut dma).is_err());
        let again: Vec<PinnedBlock> = (0..8).map(|_| pinned::acquire(data.len())).collect::<Result<_>>()?;
        assert!(again.iter().all(|b| b.ptr() as usize != dma.stage), "a block a DMA may still write was reused");
        Ok(())
    }
}
