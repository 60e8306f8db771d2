//! Pageable copies by every path (issue 21): direct, inline (one pinned block in pieces
//! on the op's stream: an upload queues each piece's DMA right after copying it in, a
//! download copies each piece out once its DMA has landed) and staged through the copy
//! threads, both ways. Each path is forced through
//! the knobs the GPU bench uses, at sizes around the thresholds and the piece edges, and
//! must give the same bytes. The inline path's block must not be reused before its DMAs
//! are done: uploads queued behind long work are followed at once by other uploads and
//! pinned tensors of the same pool bin (on the host backend the hazard checker reports
//! such a reuse by name; on the GPU the data would be wrong). The host backend models the
//! inline path piece by piece (its DMAs are jobs on the simulated stream, checked by the
//! hazard checker); its direct and staged paths are one plain copy each, so on the host
//! those rows check the bytes and the path choice only.

mod common;

use common::keep_busy;
use locus::tuning::{
    default_download_paths, default_inline_download_piece, default_inline_upload, default_upload_paths,
    set_download_paths, set_inline_download_piece, set_inline_upload, set_upload_paths, InlineUpload,
};
use locus::{on_stream, Cpu, Cuda, Pinned, Stream, Tensor};

type G = Cuda<0>;

// The knobs are process-wide: these tests run one at a time, and each puts the
// defaults back when it ends, by panic too.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

struct Knobs(#[allow(dead_code)] std::sync::MutexGuard<'static, ()>);

fn knobs() -> Knobs {
    Knobs(SERIAL.lock().unwrap_or_else(|p| p.into_inner()))
}

impl Drop for Knobs {
    fn drop(&mut self) {
        let (inline_min, staged_min) = default_upload_paths();
        set_upload_paths(inline_min, staged_min);
        let (inline_min, staged_min) = default_download_paths();
        set_download_paths(inline_min, staged_min);
        set_inline_upload(default_inline_upload());
        set_inline_download_piece(default_inline_download_piece());
    }
}

/// Each path, as the `(inline_min, staged_min)` that forces it at every size.
const PATHS: [(&str, (usize, usize)); 3] =
    [("direct", (usize::MAX, usize::MAX)), ("inline", (0, usize::MAX)), ("staged", (0, 0))];

fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len).map(|i| ((i * 7 + seed * 13) % 251) as u8).collect()
}

#[test]
fn every_upload_and_download_path_gives_the_same_bytes_at_every_size() -> locus::Result<()> {
    let _k = knobs();
    let sizes = [1, 4095, (256 << 10) - 1, 256 << 10, (256 << 10) + 1, (1 << 20) + 77, (4 << 20) - 1, (4 << 20) + 3];
    for (seed, len) in sizes.into_iter().enumerate() {
        let data = pattern(len, seed);
        let host = Tensor::<Cpu, u8>::from_vec(data.clone(), [len])?;
        for (up, (inline_min, staged_min)) in PATHS {
            set_upload_paths(inline_min, staged_min);
            let dev = host.to::<G>()?;
            let from_slice = Tensor::<G, u8>::from_slice(&data, [len])?;
            for (down, (inline_min, staged_min)) in PATHS {
                set_download_paths(inline_min, staged_min);
                assert!(dev.to_vec()? == data, "{len} bytes up {up}, to_vec {down}: the bytes differ");
                assert!(dev.to::<Cpu>()?.as_slice() == &data[..], "{len} bytes up {up}, to::<Cpu> {down}");
                assert!(from_slice.to_vec()? == data, "{len} bytes from_slice {up}, down {down}");
            }
        }
    }
    Ok(())
}

#[test]
fn the_inline_path_gives_the_same_bytes_with_every_piece_size_and_helper_count() -> locus::Result<()> {
    let _k = knobs();
    set_upload_paths(0, usize::MAX);
    for (seed, len) in [(256 << 10) + 1, (1 << 20) + 77, (3 << 20) + 5].into_iter().enumerate() {
        let data = pattern(len, seed);
        let host = Tensor::<Cpu, u8>::from_vec(data.clone(), [len])?;
        for piece in [1, 4096, 64 << 10, 256 << 10, 1 << 20] {
            for helpers in [0, 1, 2, 64] {
                for nontemporal in [true, false] {
                    set_inline_upload(InlineUpload { piece, helpers, nontemporal });
                    let got = host.to::<G>()?.to_vec()?;
                    assert!(got == data, "{len} bytes in pieces of {piece}, {helpers} helpers: the bytes differ");
                }
            }
        }
    }
    Ok(())
}

#[test]
fn the_inline_download_gives_the_same_bytes_with_every_piece_size_behind_long_work() -> locus::Result<()> {
    let _k = knobs();
    set_download_paths(0, usize::MAX);
    for (seed, len) in [(256 << 10) + 1, (1 << 20) + 77, (3 << 20) + 5].into_iter().enumerate() {
        let data = pattern(len, seed);
        let dev = Tensor::<G, u8>::from_slice(&data, [len])?;
        for piece in [1, 4096, 64 << 10, 256 << 10, 1 << 20] {
            set_inline_download_piece(piece);
            // The DMAs wait behind the busy work: each piece is copied out only once it landed.
            keep_busy()?;
            let doubled = (&dev + &dev)?;
            let want: Vec<u8> = data.iter().map(|v| v.wrapping_add(*v)).collect();
            assert!(doubled.to_vec()? == want, "{len} bytes in pieces of {piece}: to_vec differs");
            assert!(dev.to::<Cpu>()?.as_slice() == &data[..], "{len} bytes in pieces of {piece}: to::<Cpu> differs");
        }
    }
    let x = Tensor::<G>::full([1], 2.5)?.sum()?;
    set_download_paths(0, usize::MAX);
    assert_eq!(x.item()?, 2.5, "item() by the inline path");
    Ok(())
}

#[test]
fn an_inline_upload_behind_long_work_keeps_its_block_until_its_copies_are_done() -> locus::Result<()> {
    let _k = knobs();
    set_upload_paths(0, usize::MAX);
    let len = (1 << 20) - 100; // the 1 MiB bin of the pinned pool
    for helpers in [0, 1] {
        set_inline_upload(InlineUpload { helpers, ..default_inline_upload() });
        for round in 0..6 {
            keep_busy()?;
            let a = pattern(len, round);
            let b = pattern(len, round + 100);
            // Queued behind the busy work; the host has moved on when these return.
            let da = Tensor::<Cpu, u8>::from_vec(a.clone(), [len])?.to::<G>()?;
            let db = Tensor::<G, u8>::from_slice(&b, [len])?;
            // The same bin again, written by the host at once: never a block a copy still reads.
            let pinned = Tensor::<Cpu, u8>::full([len], 0xEE)?.pin_memory()?;
            let dc = Tensor::<G, u8>::from_slice(&a, [len])?;
            assert!(da.to_vec()? == a, "round {round}, {helpers} helpers: the first upload was overwritten");
            assert!(db.to_vec()? == b, "round {round}, {helpers} helpers: the second upload was overwritten");
            assert!(dc.to_vec()? == a, "round {round}, {helpers} helpers: the third upload was overwritten");
            assert!(pinned.as_slice().iter().all(|&v| v == 0xEE));
        }
    }
    Ok(())
}

#[test]
fn inline_uploads_on_a_side_stream_and_from_several_threads_stay_exact() -> locus::Result<()> {
    let _k = knobs();
    set_upload_paths(0, usize::MAX);
    let s = Stream::<G>::new()?;
    let data = pattern((2 << 20) + 9, 1);
    let on_side = on_stream(&s, || Tensor::<G, u8>::from_slice(&data, [data.len()]))?;
    // Read on the default stream: ordered after the side stream's copies.
    assert!(on_side.to_vec()? == data);
    let results: Vec<locus::Result<bool>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4usize)
            .map(|t| {
                scope.spawn(move || -> locus::Result<bool> {
                    let mut same = true;
                    for round in 0..4 {
                        let data = pattern((512 << 10) + 1000 * t + round, t * 10 + round);
                        let dev = Tensor::<Cpu, u8>::from_vec(data.clone(), [data.len()])?.to::<G>()?;
                        same &= dev.to_vec()? == data;
                    }
                    Ok(same)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("an upload thread panicked")).collect()
    });
    for r in results {
        assert!(r?, "a concurrent inline upload differs");
    }
    Ok(())
}

#[test]
fn a_page_locked_source_is_read_before_an_inline_upload_returns() -> locus::Result<()> {
    let _k = knobs();
    set_upload_paths(0, usize::MAX);
    for round in 0..4 {
        keep_busy()?;
        let mut p = Tensor::<Pinned>::full([1 << 18], 1.0)?;
        let dev = Tensor::<G>::from_slice(p.as_slice(), [1 << 18])?;
        p.as_mut_slice()?.fill(2.0);
        assert!(dev.to_vec()?.iter().all(|&v| v == 1.0), "round {round}: the upload read the later write");
    }
    Ok(())
}

#[test]
fn the_knobs_give_back_their_old_values_and_the_defaults_put_them_back() {
    let _k = knobs();
    let defaults = default_upload_paths();
    assert!(defaults.0 < defaults.1, "inline below staged: {defaults:?}");
    assert_eq!(set_upload_paths(0, usize::MAX), defaults);
    assert_eq!(set_upload_paths(defaults.0, defaults.1), (0, usize::MAX));
    let d = default_download_paths();
    assert!(d.1 <= 4 << 20, "large downloads are staged: {d:?}");
    assert_eq!(set_download_paths(0, 0), d);
    assert_eq!(set_download_paths(d.0, d.1), (0, 0));
    let p = default_inline_download_piece();
    assert_eq!(set_inline_download_piece(4096), p);
    assert_eq!(set_inline_download_piece(p), 4096);
    let k = InlineUpload { piece: 8192, helpers: 2, nontemporal: false };
    assert_eq!(set_inline_upload(k), default_inline_upload());
    assert_eq!(set_inline_upload(default_inline_upload()), k);
}
