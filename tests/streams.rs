//! Streams and events on the selected backend: results through other streams, automatic
//! waits when a tensor crosses streams, none for single-stream work, timing events.

mod common;

use common::keep_busy;
use locus::{cross_stream_waits, current_stream, on_stream, Cuda, Event, Stream, Tensor};

type G = Cuda<0>;

// The wait counter is process-wide: tests that cross streams must not overlap those
// that count.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn single_stream_work_inserts_no_waits() -> locus::Result<()> {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let before = cross_stream_waits();
    let x = Tensor::<G>::rand([1000, 64], 1)?;
    let w = Tensor::<G>::rand([64, 32], 2)?;
    let y = (x.matmul(&w)? + 1.0)?.relu()?.sum_dim(0, false)?;
    assert_eq!(y.shape(), &[32]);
    let s = Stream::<G>::new()?;
    let z = on_stream(&s, || -> locus::Result<_> {
        let a = Tensor::<G>::ones([256])?;
        (&a * &a)?.sum()
    })?;
    assert_eq!(cross_stream_waits(), before, "no events for work that stays on one stream");
    // Reading z on the default stream is a crossing: it waits for `s`.
    assert_eq!(z.item()?, 256.0);
    assert_eq!(cross_stream_waits(), before + 1);
    Ok(())
}

#[test]
fn a_tensor_used_on_another_stream_waits_for_its_writer() -> locus::Result<()> {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let before = cross_stream_waits();
    let (a, b) = (Stream::<G>::new()?, Stream::<G>::new()?);
    // Enough work on `a` that `b` would read stale memory without the wait: a long
    // chain first, so the product below is written tens of milliseconds later.
    let big = on_stream(&a, || -> locus::Result<_> {
        keep_busy()?;
        let m = Tensor::<G>::full([256, 256], 0.5)?;
        let mut acc = m.matmul(&m)?;
        for _ in 0..4 {
            acc = acc.matmul(&m)?;
        }
        Ok(acc)
    })?;
    let total = on_stream(&b, || big.sum())?;
    b.synchronize()?;
    // Each product multiplies by 256 * 0.5 = 128: 0.5 * 128^5 per element.
    let expect = 0.5f64 * 128f64.powi(5) * (256.0 * 256.0);
    assert!((total.item()? as f64 - expect).abs() <= expect * 1e-5, "{} vs {expect}", total.item()?);
    assert!(cross_stream_waits() > before, "crossing streams inserts a wait");
    Ok(())
}

#[test]
fn memory_read_on_another_stream_outlives_its_use() -> locus::Result<()> {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let s = Stream::<G>::new()?;
    let mut outs = Vec::new();
    for i in 0..20 {
        let t = Tensor::<G>::full([1 << 16], i as f32)?;
        // `t` is dropped right after queueing the read on `s`.
        outs.push(on_stream(&s, || t.sum())?);
    }
    s.synchronize()?;
    for (i, o) in outs.iter().enumerate() {
        assert_eq!(o.item()?, (i as f32) * 65536.0);
    }
    Ok(())
}

#[test]
fn on_stream_nests_restores_and_survives_panics() -> locus::Result<()> {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let (a, b) = (Stream::<G>::new()?, Stream::<G>::new()?);
    let default = Stream::<G>::default_stream()?;
    on_stream(&a, || {
        assert!(current_stream(Cuda::<0>).unwrap().same_as(&a));
        on_stream(&b, || assert!(current_stream(Cuda::<0>).unwrap().same_as(&b)));
        assert!(current_stream(Cuda::<0>).unwrap().same_as(&a));
    });
    let caught = std::panic::catch_unwind(|| on_stream(&a, || panic!("inside")));
    assert!(caught.is_err());
    assert!(current_stream(Cuda::<0>)?.same_as(&default));
    Ok(())
}

#[test]
fn events_order_streams_and_time_work() -> locus::Result<()> {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // Compile the kernels used below first: a first use compiles them on the host, long
    // enough for the GPU to finish the busy work.
    Tensor::<G>::rand([16], 0)?.exp()?.sum()?.item()?;
    let (a, b) = (Stream::<G>::new()?, Stream::<G>::new()?);
    let start = Event::<G>::new()?;
    start.record(&a)?;
    // `a` is slow: without the event wait, `b` would sum `x` before it is written.
    let x = on_stream(&a, || -> locus::Result<_> {
        keep_busy()?;
        Tensor::<G>::rand([1 << 20], 3)?.exp()
    })?;
    let done = a.record_event()?;
    if common::on_gpu() {
        assert!(!done.is_complete()?, "the busy work is still running");
    }
    b.wait_event(&done)?;
    // `y` is written on `b`; reading it through `to_vec` on the default stream waits
    // for `b` only, so the explicit event is what orders the sum after `x`.
    let y = on_stream(&b, || x.sum())?;
    done.synchronize()?;
    assert!(done.is_complete()?);
    let took = start.elapsed(&done)?;
    assert!(took.as_secs_f64() > 0.0, "the events bracket real work: {took:?}");
    if common::on_gpu() {
        assert!(took.as_secs_f64() > 1e-3, "a chain of 4096^3 matmuls takes milliseconds, not {took:?}");
    }
    b.synchronize()?;
    let mean = y.item()? / (1 << 20) as f32;
    assert!((mean - (std::f32::consts::E - 1.0)).abs() < 0.01, "mean of e^U(0,1) is e - 1, got {mean}");
    locus::synchronize(locus::DeviceId::Cuda(0))?;
    Ok(())
}

#[test]
fn unrecorded_events_cannot_time_and_bad_devices_are_errors() {
    let a = Event::<G>::new().unwrap();
    let b = Event::<G>::new().unwrap();
    // The same error on both backends (the driver's is CUDA_ERROR_INVALID_HANDLE).
    assert!(matches!(a.elapsed(&b), Err(locus::Error::InvalidArgument { op: "elapsed", .. })), "{:?}", a.elapsed(&b));
    assert!(matches!(Stream::<Cuda<9>>::new(), Err(locus::Error::NoSuchDevice { ordinal: 9, .. })));
    assert!(matches!(Event::<Cuda<9>>::new(), Err(locus::Error::NoSuchDevice { ordinal: 9, .. })));
}

#[test]
fn a_side_stream_tensor_used_in_many_ops_is_waited_for_once() -> locus::Result<()> {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let side = Stream::<G>::new()?;
    // Slow the writer down, so that reading `x` early would see zeros on the GPU.
    let x = on_stream(&side, || -> locus::Result<_> {
        keep_busy()?;
        Tensor::<G>::full([1 << 16], 1.0)
    })?;
    let (waits, skipped) = (cross_stream_waits(), locus::cross_stream_waits_skipped());
    let n = 50;
    let mut acc = Tensor::<G>::zeros([1 << 16])?;
    for _ in 0..n {
        acc = (&acc + &x)?;
    }
    let (w, s) = (cross_stream_waits() - waits, locus::cross_stream_waits_skipped() - skipped);
    eprintln!("{n} uses of a side-stream tensor on the default stream: {w} wait(s) inserted, {s} skipped");
    assert_eq!((w, s), (1, n - 1), "the first use waits, the others are ordered after it");
    assert!(acc.to_vec()?.iter().all(|&v| v == n as f32), "a use ran before the write");
    Ok(())
}

#[test]
fn an_explicit_event_wait_covers_the_writes_before_the_event_only() -> locus::Result<()> {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    Tensor::<G>::rand([16], 0)?.sum()?.item()?; // compile the kernels first
    let (a, b) = (Stream::<G>::new()?, Stream::<G>::new()?);
    let (x, later) = on_stream(&a, || -> locus::Result<_> {
        keep_busy()?;
        let x = Tensor::<G>::full([1 << 16], 2.0)?;
        let recorded = a.record_event()?;
        b.wait_event(&recorded)?;
        // Written after the event: `b`'s wait above does not cover it.
        keep_busy()?;
        Ok((x, Tensor::<G>::full([1 << 16], 3.0)?))
    })?;
    let (waits, skipped) = (cross_stream_waits(), locus::cross_stream_waits_skipped());
    let sx = on_stream(&b, || x.sum())?;
    assert_eq!(
        (cross_stream_waits() - waits, locus::cross_stream_waits_skipped() - skipped),
        (0, 1),
        "`b` already waited for an event recorded after `x` was written"
    );
    let sl = on_stream(&b, || later.sum())?;
    assert_eq!(cross_stream_waits() - waits, 1, "`later` was written after the event: `b` must wait for it");
    assert_eq!(sx.item()?, 2.0 * 65536.0);
    assert_eq!(sl.item()?, 3.0 * 65536.0, "the sum ran before `later` was written");
    Ok(())
}

/// `on_stream` makes a stream current for its own device only: an op on another device
/// inside it would run on that device's default stream, so it is an `Err` naming both
/// devices, while ops on the stream's device, host ops and ops of a device whose own
/// stream is current too still run.
#[test]
fn an_op_of_another_device_inside_on_stream_is_an_error_naming_both() -> locus::Result<()> {
    // Its read of `x` on `s0` is a cross-stream wait, which the counting tests must not see.
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if !locus::testing::needs_devices(2)? {
        return Ok(());
    }
    let s1 = Stream::<Cuda<1>>::new()?;
    let x = Tensor::<Cuda<0>>::ones([4])?;
    for e in [
        on_stream(&s1, || &x * 2.0).unwrap_err(),
        on_stream(&s1, || x.matmul(&x.reshape([4, 1])?.t()?.t()?)).unwrap_err(),
        on_stream(&s1, || Tensor::<Cuda<0>>::zeros([2])).unwrap_err(),
    ] {
        let m = e.to_string();
        assert!(m.contains("cuda:0") && m.contains("cuda:1") && m.contains("default stream"), "{m}");
    }
    let s0 = Stream::<Cuda<0>>::new()?;
    let both = on_stream(&s1, || on_stream(&s0, || &x * 2.0))?;
    s0.synchronize()?;
    assert_eq!(both.to_vec()?, vec![2.0; 4]);
    let own = on_stream(&s1, || Tensor::<Cuda<1>>::ones([2])? + 1.0)?;
    s1.synchronize()?;
    assert_eq!(own.to_vec()?, vec![2.0; 2]);
    let host = on_stream(&s1, || locus::Tensor::<locus::Cpu>::ones([2])? * 3.0)?;
    assert_eq!(host.to_vec()?, vec![3.0; 2]);
    // Out of the scope, the same op runs.
    assert_eq!((&x * 2.0)?.to_vec()?, vec![2.0; 4]);
    Ok(())
}

/// Two threads queue ops on the default stream and read each result on one side stream.
/// A read on the side stream skips the wait for a write its stream is already ordered
/// after (an event recorded on the writer later than the write); an op's write must not
/// be numbered before its job is queued, or an event that the other thread records in
/// between (before the job) claims it, and a read of the op's output skips a wait it
/// needs: the hazard checker (on in debug builds) reports that read.
#[test]
fn a_write_is_numbered_only_once_queued_so_no_event_of_another_thread_claims_it() -> locus::Result<()> {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let side = Stream::<G>::new()?;
    let x = Tensor::<G>::ones([64])?;
    let work = |k: f32| -> locus::Result<()> {
        for _ in 0..1500 {
            let y = (&x * k)?;
            let s = on_stream(&side, || y.sum())?;
            assert_eq!(s.item()?, 64.0 * k);
        }
        Ok(())
    };
    let work = &work;
    std::thread::scope(|scope| {
        let a = scope.spawn(move || work(2.0));
        let b = scope.spawn(move || work(3.0));
        a.join().expect("thread a")?;
        b.join().expect("thread b")
    })
}
