//! Regression tests for the holes a review found in the safety promise: copies from
//! pinned memory that the host could overwrite while the DMA still reads them, cuBLAS
//! work queued on another thread's stream, streams and cached memory that outlive their
//! use, memory counts that differ between backends, and a bad `LOCUS_HOST_DEVICES`.
//!
//! Each round first queues a long chain of matmuls, so the copy under test waits behind
//! it and a host write that does not wait lands first. On the GPU that takes tens of
//! milliseconds; on the host backend the simulated streams run the same work behind the
//! host, and its hazard checker (on in `cargo test`) reports a missing wait or hold by
//! name even when the timing hides it (`LOCUS_HOST_STREAM_DELAY` widens the window).

mod common;

use common::keep_busy;
use locus::{
    memory_allocated, memory_reserved, on_stream, stream_count, Cpu, Cuda, DeviceId, Loader, Pinned, Stream, Tensor,
};

type G = Cuda<0>;

// Pool, stream and memory counters are process-wide: these tests run one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

const ROUNDS: usize = 20;
const LEN: usize = 1 << 16;

#[test]
fn a_plain_copy_from_pinned_memory_reads_its_source_before_the_pool_reuses_it() -> locus::Result<()> {
    let _s = serial();
    let mut wrong = Vec::new();
    for round in 0..ROUNDS {
        keep_busy()?;
        let src = Tensor::<Cpu>::full([LEN], round as f32)?.pin_memory()?;
        let dev = src.to::<G>()?; // queued behind the busy work
        drop(src);
        // The same bin of the pool: it must not hand out the block the DMA still reads.
        let next = Tensor::<Cpu>::full([LEN], -1.0)?.pin_memory()?;
        let got = dev.to_vec()?;
        if got.iter().any(|&v| v != round as f32) {
            wrong.push((round, got[0]));
        }
        drop(next);
    }
    assert!(wrong.is_empty(), "the device copy holds another tensor's data in (round, value) {wrong:?}");
    Ok(())
}

#[test]
fn a_copy_to_another_device_list_from_a_pinned_batch_keeps_every_slice() -> locus::Result<()> {
    let _s = serial();
    for round in 0..ROUNDS / 4 {
        keep_busy()?;
        let batch = Tensor::<Cpu>::full([2, LEN], round as f32)?.pin_memory()?;
        let ids = [DeviceId::Cuda(0), DeviceId::Cuda(0)];
        let parts = locus::parallel::scatter(&batch.into_dyn(), ids)?;
        // Pinned blocks of a slice's size: the bin the slices' blocks went back to.
        let next = [Tensor::<Cpu>::full([LEN], -1.0)?.pin_memory()?, Tensor::<Cpu>::full([LEN], -1.0)?.pin_memory()?];
        for p in &parts {
            assert!(p.to_vec()?.iter().all(|&v| v == round as f32), "round {round}: a slice was overwritten");
        }
        drop(next);
    }
    Ok(())
}

#[test]
fn forgetting_a_transfer_does_not_let_the_host_write_its_source_early() -> locus::Result<()> {
    let _s = serial();
    let s = Stream::<G>::new()?;
    let mut wrong = Vec::new();
    for round in 0..ROUNDS {
        let mut src = Tensor::<Cpu>::full([LEN], 1.0)?.pin_memory()?;
        on_stream(&s, keep_busy)?;
        let copy = src.to_async(&s)?;
        let dev = copy.tensor().clone();
        // Safe code: the borrow of `src` ends without the transfer's Drop running.
        std::mem::forget(copy);
        src.as_mut_slice()?.fill(2.0);
        let got = dev.to_vec()?;
        if got.iter().any(|&v| v != 1.0) {
            wrong.push((round, got[0]));
        }
    }
    assert!(wrong.is_empty(), "the DMA read the host's later write in (round, value) {wrong:?}");
    Ok(())
}

#[test]
fn a_slice_of_pinned_memory_given_to_from_slice_is_read_before_it_returns() -> locus::Result<()> {
    let _s = serial();
    let mut wrong = Vec::new();
    for round in 0..ROUNDS {
        keep_busy()?;
        let mut p = Tensor::<Pinned>::full([LEN], 1.0)?;
        let dev = Tensor::<G>::from_slice(p.as_slice(), [LEN])?;
        p.as_mut_slice()?.fill(2.0);
        let got = dev.to_vec()?;
        if got.iter().any(|&v| v != 1.0) {
            wrong.push((round, got[0]));
        }
    }
    assert!(wrong.is_empty(), "from_slice returned before reading the slice: (round, value) {wrong:?}");
    Ok(())
}

#[test]
fn matmuls_on_several_threads_each_with_its_own_stream_stay_on_that_stream() -> locus::Result<()> {
    let _s = serial();
    // Each stream owns its cuBLAS handle, bound once, so no thread can move another's
    // gemm to its stream. The product is read on the default stream: if the gemm had run
    // on a stream other than its output's, that read would not wait for it.
    let barrier = std::sync::Barrier::new(4);
    let results: Vec<locus::Result<bool>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|t| {
                let barrier = &barrier;
                scope.spawn(move || -> locus::Result<bool> {
                    let s = Stream::<G>::new()?;
                    let mut ok = true;
                    for i in 0..25 {
                        let v = (t * 100 + i) as f32;
                        barrier.wait();
                        let y = on_stream(&s, || -> locus::Result<_> {
                            keep_busy()?;
                            let a = Tensor::<G>::full([64, 64], v)?;
                            let b = Tensor::<G>::full([64, 64], 1.0)?;
                            a.matmul(&b)
                        })?;
                        ok &= y.to_vec()?.iter().all(|&x| x == v * 64.0);
                    }
                    Ok(ok)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("matmul thread panicked")).collect()
    });
    for r in results {
        assert!(r?, "a product read on another stream was not ready");
    }
    Ok(())
}

#[test]
fn a_loader_per_epoch_leaves_no_streams_or_cached_memory_behind() -> locus::Result<()> {
    let _s = serial();
    let d = DeviceId::Cuda(0);
    let epoch = || -> locus::Result<f32> {
        let batches = (0..6).map(|i| Tensor::<Cpu>::full([4096], i as f32));
        let loader = Loader::from_batches(batches).workers(2).prefetch(2).to::<G>()?;
        let mut total = 0.0;
        for b in loader {
            total += ((b? * 2.0)?.sum()?).item()?;
        }
        Ok(total)
    };
    // Warm up (kernels, the device's own streams), then measure over 50 epochs.
    epoch()?;
    let (streams, reserved) = (stream_count()?, memory_reserved(d)?);
    for _ in 0..50 {
        assert_eq!(epoch()?, 2.0 * 4096.0 * 15.0);
        let s = Stream::<G>::new()?;
        on_stream(&s, || -> locus::Result<_> { (Tensor::<G>::ones([1000])? + 1.0)?.sum() })?.item()?;
    }
    assert_eq!(stream_count()?, streams, "streams of dropped loaders and dropped `Stream`s must go");
    assert!(
        memory_reserved(d)? <= reserved + (1 << 20),
        "memory cached under dead streams: {} bytes reserved after, {reserved} before",
        memory_reserved(d)?
    );
    Ok(())
}

#[test]
fn memory_allocated_counts_the_bytes_asked_for_on_every_backend() -> locus::Result<()> {
    let _s = serial();
    let d = DeviceId::Cuda(0);
    let before = memory_allocated(d)?;
    let t = Tensor::<G, u8>::zeros([3])?;
    let u = Tensor::<G>::zeros([1000])?;
    assert_eq!(memory_allocated(d)?, before + 3 + 4000);
    drop((t, u));
    assert_eq!(memory_allocated(d)?, before);
    Ok(())
}

#[test]
fn a_huge_simulated_device_count_is_an_error_not_an_abort() {
    // The backend is chosen once per process: check it in a process of its own.
    if std::env::var_os("LOCUS_SOUNDNESS_CHILD").is_some() {
        match Tensor::<G>::zeros([1]) {
            Err(locus::Error::NoBackend { reason, .. }) => {
                assert!(reason.contains("LOCUS_HOST_DEVICES"), "{reason}");
                println!("child: clear error: {reason}");
            }
            other => panic!("expected NoBackend, got {other:?}"),
        }
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args(["--exact", "a_huge_simulated_device_count_is_an_error_not_an_abort", "--nocapture"])
        .env("LOCUS_SOUNDNESS_CHILD", "1")
        .env("LOCUS_BACKEND", "host")
        .env("LOCUS_HOST_DEVICES", "18446744073709551615")
        .output()
        .expect("the test binary runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "child failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("child: clear error"), "{stdout}");
}
