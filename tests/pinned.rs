//! Pinned memory: the caching pool, async copies that borrow their source, pending
//! device-to-host copies, and staged pageable copies, on the selected backend.

mod common;

use common::{keep_busy, on_gpu};
use locus::{on_stream, pinned_stats, release_cached_pinned, Cpu, Cuda, Pinned, Stream, Tensor};

type G = Cuda<0>;

// The pool's counters are process-wide: tests that read them run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

#[test]
fn pin_memory_draws_from_the_pool_and_reuses_blocks() -> locus::Result<()> {
    let _s = serial();
    let host = Tensor::<Cpu>::arange(0.0, 3000.0, 1.0)?;
    let p = host.pin_memory()?;
    assert!(p.is_pinned() && !host.is_pinned());
    assert_eq!(p.to_vec()?, host.to_vec()?);
    let held = pinned_stats().bytes_held;
    drop(p);
    // Same power-of-two bin (16 KiB): served from the cache, no new allocation.
    let before = pinned_stats();
    let q = Tensor::<Cpu>::ones([2500])?.pin_memory()?;
    let after = pinned_stats();
    assert_eq!(after.host_allocs, before.host_allocs);
    assert_eq!(after.cache_hits, before.cache_hits + 1);
    assert_eq!(after.bytes_held, held);
    assert_eq!(after.bytes_in_use, before.bytes_in_use + 16384);
    drop(q);
    Ok(())
}

#[test]
fn steady_state_makes_no_new_pinned_allocations() -> locus::Result<()> {
    let _s = serial();
    let s = Stream::<G>::new()?;
    let mut warm = pinned_stats();
    for i in 0..23 {
        if i == 3 {
            warm = pinned_stats();
        }
        let p = Tensor::<Cpu>::rand([1 << 16], i)?.pin_memory()?;
        let d = p.to_async(&s)?.wait()?;
        let back = d.to_pinned_async(&s)?.wait()?;
        assert_eq!(back.as_slice(), p.as_slice());
    }
    let after = pinned_stats();
    assert_eq!(after.host_allocs, warm.host_allocs, "all blocks come from the cache after warm-up");
    assert!(after.cache_hits >= warm.cache_hits + 40);
    Ok(())
}

#[test]
fn a_block_is_not_reused_while_its_copy_may_run() -> locus::Result<()> {
    let _s = serial();
    let s = Stream::<G>::new()?;
    for round in 0..10 {
        let src = Tensor::<Cpu>::full([1 << 18], 3.0)?.pin_memory()?;
        on_stream(&s, keep_busy)?;
        let copy = src.to_async(&s)?;
        let x = copy.tensor().clone();
        // End the borrow without waiting (safe code), then give the block back.
        std::mem::forget(copy);
        let block = src.as_slice().as_ptr();
        drop(src);
        // The same bin: while the copy may run, the pool must hand out another block.
        let other = Tensor::<Cpu>::full([1 << 18], 9.0)?.pin_memory()?;
        if on_gpu() {
            assert_ne!(other.as_slice().as_ptr(), block, "round {round}: the block of a running copy was reused");
        }
        assert_eq!(x.sum()?.item()?, 3.0 * (1 << 18) as f32, "round {round}");
        assert_eq!(other.as_slice()[0], 9.0);
    }
    release_cached_pinned();
    let st = pinned_stats();
    assert!(st.bytes_held >= st.bytes_in_use);
    Ok(())
}

#[test]
fn async_copies_round_trip_and_compose_with_streams() -> locus::Result<()> {
    let _s = serial();
    let s = Stream::<G>::new()?;
    let mut src = Tensor::<Cpu, i32>::arange(0, 1000, 1)?.pin_memory()?;
    {
        let copy = src.to_async(&s)?;
        let doubled = on_stream(&s, || copy.tensor() * 2)?;
        assert!(copy.is_ready().is_ok());
        let x = copy.wait()?;
        assert_eq!(doubled.to_vec()?, (0..1000).map(|v| v * 2).collect::<Vec<_>>());
        let pending = x.to_pinned_async(&s)?;
        let _ = pending.is_ready()?;
        assert_eq!(pending.wait()?.as_slice(), src.as_slice());
    }
    // After the copy is waited, the source is ours to change again.
    src.as_mut_slice()?[0] = -1;
    assert_eq!(src.as_slice()[0], -1);
    Ok(())
}

#[test]
fn dropping_a_transfer_waits_for_it() -> locus::Result<()> {
    let _s = serial();
    let s = Stream::<G>::new()?;
    let src = Tensor::<Pinned>::full([1 << 20], 1.5)?;
    on_stream(&s, keep_busy)?;
    let copy = src.to_async(&s)?;
    // Marks the end of the copy (nothing else is queued on `s` after it).
    let copied = s.record_event()?;
    let t = copy.tensor().clone();
    if on_gpu() {
        assert!(!copied.is_complete()?, "the copy waits behind the busy work");
    }
    drop(copy);
    assert!(copied.is_complete()?, "dropping the transfer returned before the copy completed");
    drop(src);
    assert_eq!(t.sum()?.item()?, 1.5 * (1 << 20) as f32);
    Ok(())
}

#[test]
/// On the cuda backend the copies go through the copy threads' pinned stages; the host
/// backend copies them in one plain copy, so there this checks the bytes only.
fn large_pageable_copies_are_exact() -> locus::Result<()> {
    let _s = serial();
    // 70 MiB + a ragged tail: many chunks over every copy thread's stages.
    let n = (70 << 20) / 4 + 12345;
    let host = Tensor::<Cpu>::rand([n], 11)?;
    let dev = host.to::<G>()?;
    let (d, h) = (dev.sum()?.item()?, host.sum()?.item()?);
    assert!((d - h).abs() <= 1e-4 * h.abs(), "sum on the device {d}, on the host {h}");
    let back = dev.to::<Cpu>()?;
    assert_eq!(back.as_slice(), host.as_slice());
    let bytes = Tensor::<Cpu, u8>::from_vec((0..(9 << 20)).map(|i| (i % 251) as u8).collect(), [9 << 20])?;
    assert_eq!(bytes.to::<G>()?.to::<Cpu>()?.as_slice(), bytes.as_slice());
    Ok(())
}

#[test]
fn pageable_copies_are_exact_around_every_chunk_boundary() -> locus::Result<()> {
    let _s = serial();
    let pattern = |len: usize, seed: usize| -> Vec<u8> { (0..len).map(|i| ((i * 7 + seed) % 251) as u8).collect() };
    for (k, len) in [(4 << 20) - 1, 4 << 20, (4 << 20) + 1, (16 << 20) + 3, (33 << 20) + 4095].into_iter().enumerate() {
        let host = Tensor::<Cpu, u8>::from_vec(pattern(len, k), [len])?;
        let back = host.to::<G>()?.to::<Cpu>()?;
        assert!(back.as_slice() == host.as_slice(), "round trip of {len} bytes differs");
    }
    Ok(())
}

#[test]
fn pageable_copies_from_several_threads_at_once_stay_exact() -> locus::Result<()> {
    let _s = serial();
    let results: Vec<locus::Result<bool>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4usize)
            .map(|t| {
                scope.spawn(move || -> locus::Result<bool> {
                    let len = (12 << 20) + 1000 * t;
                    let data: Vec<u8> = (0..len).map(|i| ((i + 13 * t) % 253) as u8).collect();
                    let host = Tensor::<Cpu, u8>::from_vec(data, [len])?;
                    let mut same = true;
                    for _ in 0..3 {
                        same &= host.to::<G>()?.to::<Cpu>()?.as_slice() == host.as_slice();
                    }
                    Ok(same)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("copy thread panicked")).collect()
    });
    for r in results {
        assert!(r?, "a concurrent round trip differs");
    }
    Ok(())
}

#[test]
fn async_copies_reject_wrong_devices_at_run_time() -> locus::Result<()> {
    let _s = serial();
    let x = Tensor::<G>::ones([4])?.into_dyn();
    let h = Tensor::<Cpu>::ones([4])?.into_dyn();
    let s = Stream::<G>::new()?;
    assert!(x.to_pinned_async(&s).is_ok());
    assert!(matches!(h.to_pinned_async(&s), Err(locus::Error::DeviceMismatch { .. })));
    let p = Tensor::<Pinned>::ones([4])?;
    let host_stream = Stream::<Cpu>::new()?;
    assert!(matches!(p.to_async(&host_stream), Err(locus::Error::InvalidArgument { op: "to_async", .. })));
    Ok(())
}
