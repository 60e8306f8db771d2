//! Tests of the inline upload with a recording `PieceUploads`.

use std::sync::Arc;

use crate::backend::api::fence::Fence;

use crate::backend::transfer::paths::tests::knobs;
use crate::backend::transfer::paths::{set_inline_upload, InlineUpload, INLINE_UPLOAD};
use crate::backend::transfer::upload::*;
use crate::error::Error;

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

impl PieceUploads for Mock<'_> {
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

    fn mark(&mut self) -> Result<Arc<dyn Fence>> {
        self.marks += 1;
        if self.mark_fails {
            return Err(failed("mark"));
        }
        Ok(Arc::new(Done))
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
                    set_inline_upload(INLINE_UPLOAD);
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
            set_inline_upload(InlineUpload { helpers, ..INLINE_UPLOAD });
            let mut dma = Mock::new(&data);
            dma.fail_at = Some(fail_at);
            let done = upload_inline(&data, &mut dma);
            set_inline_upload(INLINE_UPLOAD);
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

/// The event of a recorded upload: its copies are done at once.
#[derive(Debug)]
struct Done;

impl Fence for Done {
    fn is_done(&self) -> bool {
        true
    }

    fn wait(&self) -> Result<()> {
        Ok(())
    }
}
