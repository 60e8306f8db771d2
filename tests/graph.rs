//! Graphs on the selected backend: capture once, replay with new inputs; what cannot be
//! captured is an error naming the op; memory made in a capture stays the graph's; a
//! replay is ordered with the work around it on any stream; forked streams join.

mod common;

use common::keep_busy;
use locus::{
    kernel, memory_allocated, on_stream, Cuda, Device, DeviceId, Dyn, Error, Event, Graph, Grid, Loader, Stream, Tensor,
};

type G = Cuda<0>;

// Memory counts are per device and process-wide: tests that count must not overlap
// those that allocate.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn not_capturable(r: locus::Result<impl std::fmt::Debug>) -> &'static str {
    match r {
        Err(Error::NotCapturable { op, .. }) => op,
        other => panic!("expected NotCapturable, got {other:?}"),
    }
}

/// The chain of the benchmark: x + b, then + b nineteen more times.
fn chain(x: &Tensor<G>, b: &Tensor<G>) -> locus::Result<Tensor<G>> {
    let mut y = (x + b)?;
    for _ in 1..20 {
        y = (&y + b)?;
    }
    Ok(y)
}

#[test]
fn a_replay_runs_the_captured_ops_on_the_inputs_of_now() -> locus::Result<()> {
    let _one = serial();
    let s = Stream::<G>::new()?;
    let mut x = Tensor::<G>::from_vec((0..1024).map(|i| i as f32).collect(), [1024])?;
    let mut b = Tensor::<G>::full([1024], 0.5)?;
    let mut g = Graph::capture(&s, (&mut x, &mut b), |(x, b)| chain(x, b))?;
    assert!(matches!(g.outputs(), Err(Error::InvalidArgument { op: "Graph::outputs", .. })));
    let want = |x0: f32, i: usize| x0 + i as f32 + 10.0;
    let y = g.replay()?.to_vec()?;
    assert!(y.iter().enumerate().all(|(i, &v)| v == want(0.0, i)), "first replay: {:?}", &y[..4]);
    for round in 1..5 {
        let (mut xs, _) = g.inputs_mut();
        xs.copy_from_slice(&(0..1024).map(|i| (i + round * 1000) as f32).collect::<Vec<_>>())?;
        let y = g.replay()?.to_vec()?;
        assert!(
            y.iter().enumerate().all(|(i, &v)| v == want((round * 1000) as f32, i)),
            "round {round}: {:?}",
            &y[..4]
        );
    }
    assert_eq!(g.outputs()?.shape(), &[1024]);
    drop(g);
    assert_eq!(x.to_vec()?[0], 4000.0, "the input holds what was last written into it");
    Ok(())
}

#[test]
fn nothing_runs_while_capturing() -> locus::Result<()> {
    let _one = serial();
    let s = Stream::<G>::new()?;
    let mut x = Tensor::<G>::ones([4])?;
    let mut seen = None;
    let mut g = Graph::capture(&s, &mut x, |x| {
        let y = (x * 3.0)?;
        seen = Some(not_capturable(y.to_vec()));
        Ok(y)
    })?;
    assert_eq!(seen, Some("to_vec / item (a read by the host)"));
    assert_eq!(g.replay()?.to_vec()?, vec![3.0; 4]);
    Ok(())
}

#[test]
fn what_cannot_be_captured_is_an_error_naming_it() -> locus::Result<()> {
    let _one = serial();
    let s = Stream::<G>::new()?;
    let mut x = Tensor::<Cuda<0>>::ones([4])?;
    let mut ints = Tensor::<Cuda<0>, i32>::from_vec(vec![4, 6], [2])?;
    let other = Tensor::<Cuda<1>>::ones([4]);
    let host = Tensor::<locus::Cpu>::ones([4])?;
    let outside = Tensor::<G>::ones([4])?;
    let mut ops = Vec::new();
    let g = Graph::capture(&s, (&mut x, &mut ints), |(x, ints)| {
        ops.push(not_capturable(x.to_vec()));
        ops.push(not_capturable(s.synchronize()));
        ops.push(not_capturable(locus::synchronize(DeviceId::Cuda(0))));
        ops.push(not_capturable(Tensor::<G>::from_vec(vec![1.0; 4], [4])));
        ops.push(not_capturable(x.to::<locus::Cpu>()));
        ops.push(not_capturable(&host + 1.0));
        if let Ok(other) = &other {
            ops.push(not_capturable(other + 1.0));
        }
        ops.push(not_capturable(x + &outside));
        ops.push(not_capturable(ints / 2));
        ops.push(not_capturable(
            Loader::from_batches((0..2).map(|_| Tensor::<locus::Cpu>::ones([4]))).to::<G>().map(|_| ()),
        ));
        let ev = s.record_event()?;
        ops.push(not_capturable(ev.synchronize()));
        ops.push(not_capturable(ev.is_complete()));
        (x * 2.0)?;
        Ok(())
    });
    g?;
    let mut want = vec![
        "to_vec / item (a read by the host)",
        "Stream::synchronize",
        "synchronize",
        "a copy from host memory",
        "a copy between host and device",
        "add",
    ];
    if other.is_ok() {
        want.push("add");
    }
    want.extend(["reading a tensor", "integer division", "Loader", "Event::synchronize", "Event::is_complete"]);
    assert_eq!(ops, want);
    // The stream runs work again once the capture is over.
    let y = on_stream(&s, || &x + 1.0)?;
    assert_eq!(y.to_vec()?, vec![2.0; 4]);
    Ok(())
}

#[test]
fn an_error_in_the_closure_ends_the_capture() -> locus::Result<()> {
    let _one = serial();
    let s = Stream::<G>::new()?;
    let mut x = Tensor::<G>::ones([4])?;
    let r: locus::Result<Graph<G, _, Tensor<G>>> = Graph::capture(&s, &mut x, |x| {
        let y = (x + 1.0)?;
        y.to_vec()?; // fails: the capture ends and the error comes back
        Ok(y)
    });
    assert!(matches!(r, Err(Error::NotCapturable { .. })), "{r:?}");
    let y = on_stream(&s, || &x * 5.0)?;
    assert_eq!(y.to_vec()?, vec![5.0; 4]);
    let mut g = Graph::capture(&s, &mut x, |x| x - 1.0)?;
    assert_eq!(g.replay()?.to_vec()?, vec![0.0; 4]);
    Ok(())
}

#[test]
fn memory_made_in_a_capture_cannot_leave_it_but_through_the_outputs() -> locus::Result<()> {
    let _one = serial();
    let s = Stream::<G>::new()?;
    let mut x = Tensor::<G>::ones([4])?;
    let mut kept = Vec::new();
    let r = Graph::capture(&s, &mut x, |x| {
        let y = (x + 1.0)?;
        kept.push(y.clone());
        Ok(y)
    });
    assert!(matches!(r, Err(Error::InvalidArgument { op: "Graph::capture", .. })), "{r:?}");
    let mut inner = Vec::new();
    let r = Graph::capture(&s, &mut x, |x| {
        inner.push((x * 2.0)?);
        Ok(())
    });
    assert!(matches!(r, Err(Error::InvalidArgument { op: "Graph::capture", .. })), "{r:?}");
    let mut clones = Vec::new();
    let r = Graph::capture(&s, &mut x, |x| {
        clones.push(x.clone());
        x + 1.0
    });
    assert!(matches!(r, Err(Error::InvalidArgument { op: "Graph::capture", .. })), "{r:?}");
    drop((kept, inner, clones));
    // A view of an output is the output: allowed.
    let mut g = Graph::capture(&s, &mut x, |x| {
        let y = (x + 1.0)?;
        let v = y.reshape([2, 2])?;
        Ok((y, v))
    })?;
    let (y, v) = g.replay()?;
    assert_eq!((y.to_vec()?, v.shape().to_vec()), (vec![2.0; 4], vec![2, 2]));
    Ok(())
}

#[test]
fn a_shared_input_gets_memory_of_its_own() -> locus::Result<()> {
    let _one = serial();
    let s = Stream::<G>::new()?;
    let mut x = Tensor::<G>::ones([4])?;
    let alias = x.clone();
    let mut g = Graph::capture(&s, &mut x, |x| x * 2.0)?;
    g.inputs_mut().copy_from_slice(&[5.0; 4])?;
    assert_eq!(g.replay()?.to_vec()?, vec![10.0; 4]);
    assert_eq!(alias.to_vec()?, vec![1.0; 4], "a tensor that shared the input's memory is not written");
    Ok(())
}

#[test]
fn the_graph_frees_its_memory_when_dropped() -> locus::Result<()> {
    let _one = serial();
    let s = Stream::<G>::new()?;
    let mut x = Tensor::<G>::ones([1 << 16])?;
    let mut b = Tensor::<G>::ones([1 << 16])?;
    let before = memory_allocated(DeviceId::Cuda(0))?;
    let mut g = Graph::capture(&s, (&mut x, &mut b), |(x, b)| chain(x, b))?;
    let during = memory_allocated(DeviceId::Cuda(0))?;
    assert_eq!(during - before, 20 * (1 << 16) * 4, "twenty intermediates, kept by the graph");
    g.replay()?;
    drop(g);
    s.synchronize()?;
    assert_eq!(memory_allocated(DeviceId::Cuda(0))?, before);
    Ok(())
}

#[test]
fn a_replay_waits_for_an_input_written_on_another_stream() -> locus::Result<()> {
    let _one = serial();
    let (s, side) = (Stream::<G>::new()?, Stream::<G>::new()?);
    let mut x = Tensor::<G>::zeros([1024])?;
    let mut g = Graph::capture(&s, &mut x, |x| x + 1.0)?;
    for round in 1..20 {
        let fresh = on_stream(&side, || -> locus::Result<_> {
            keep_busy()?; // the write below runs late on `side`
            Tensor::<G>::full([1024], round as f32)
        })?;
        on_stream(&side, || g.inputs_mut().copy_from(&fresh))?;
        let y = g.replay()?.to_vec()?;
        assert!(y.iter().all(|&v| v == round as f32 + 1.0), "round {round}: {:?}", &y[..4]);
    }
    Ok(())
}

#[test]
fn a_replay_waits_for_earlier_reads_of_its_outputs() -> locus::Result<()> {
    let _one = serial();
    let (s, side) = (Stream::<G>::new()?, Stream::<G>::new()?);
    let mut x = Tensor::<G>::zeros([1024])?;
    let mut g = Graph::capture(&s, &mut x, |x| x + 1.0)?;
    let mut copies = Vec::new();
    for round in 0..10 {
        g.inputs_mut().copy_from_slice(&[round as f32; 1024])?;
        let y = g.replay()?;
        // Read on `side` behind a long queue: the next replay must wait for the read.
        copies.push(on_stream(&side, || -> locus::Result<_> {
            keep_busy()?;
            y.to_tensor()
        })?);
    }
    for (round, c) in copies.iter().enumerate() {
        assert!(c.to_vec()?.iter().all(|&v| v == round as f32 + 1.0), "copy {round}");
    }
    Ok(())
}

#[test]
fn a_read_of_an_output_on_another_stream_waits_for_the_replay() -> locus::Result<()> {
    let _one = serial();
    let (s, r, side) = (Stream::<G>::new()?, Stream::<G>::new()?, Stream::<G>::new()?);
    let mut x = Tensor::<G>::zeros([1024])?;
    let mut g = Graph::capture(&s, &mut x, |x| x + 1.0)?;
    for round in 0..10 {
        g.inputs_mut().copy_from_slice(&[round as f32; 1024])?;
        // On a stream of its own (not the capture's, where the graph's memory lives),
        // behind a long queue: the replay runs late.
        on_stream(&r, keep_busy)?;
        let y = g.replay_on(&r)?;
        // Copied on `side` at once: the copy must wait for the replay (no event marks its
        // end; `side` waits for `r` as of the read).
        let c = on_stream(&side, || y.to_tensor())?;
        let got = c.to_vec()?;
        assert!(got.iter().all(|&v| v == round as f32 + 1.0), "round {round}: {:?}", &got[..4]);
    }
    Ok(())
}

#[test]
fn replays_on_other_streams_are_ordered_one_after_the_other() -> locus::Result<()> {
    let _one = serial();
    let (s, a, b) = (Stream::<G>::new()?, Stream::<G>::new()?, Stream::<G>::new()?);
    let mut x = Tensor::<G>::ones([256])?;
    let mut g = Graph::capture(&s, &mut x, |x| {
        let y = (x * 2.0)?;
        (&y + &y)?.sum()
    })?;
    for (i, st) in [&a, &b, &s, &a].into_iter().enumerate() {
        on_stream(st, keep_busy)?;
        let total = g.replay_on(st)?.item()?;
        assert_eq!(total, 1024.0, "replay {i}");
    }
    Ok(())
}

#[test]
fn work_forked_to_another_stream_is_part_of_the_graph() -> locus::Result<()> {
    let _one = serial();
    let (s, side) = (Stream::<G>::new()?, Stream::<G>::new()?);
    let mut x = Tensor::<G>::from_vec(vec![1.0, 2.0, 3.0, 4.0], [4])?;
    let mut g = Graph::capture(&s, &mut x, |x| {
        let fork = s.record_event()?;
        side.wait_event(&fork)?; // `side` joins the capture
        let left = on_stream(&side, || x * 10.0)?;
        let right = (x + 1.0)?;
        let join = side.record_event()?;
        s.wait_event(&join)?;
        &left + &right
    })?;
    assert_eq!(g.replay()?.to_vec()?, vec![12.0, 23.0, 34.0, 45.0]);
    g.inputs_mut().copy_from_slice(&[0.0; 4])?;
    assert_eq!(g.replay()?.to_vec()?, vec![1.0; 4]);
    // Outside the capture `side` runs work again.
    assert_eq!(on_stream(&side, || &x * 2.0)?.to_vec()?, vec![0.0; 4]);
    Ok(())
}

#[test]
fn a_fork_never_joined_back_is_an_error() -> locus::Result<()> {
    let _one = serial();
    let (s, side) = (Stream::<G>::new()?, Stream::<G>::new()?);
    let mut x = Tensor::<G>::ones([4])?;
    let r = Graph::capture(&s, &mut x, |x| {
        side.wait_event(&s.record_event()?)?;
        let left = on_stream(&side, || x * 10.0)?;
        drop(left);
        x + 1.0
    });
    assert!(matches!(r, Err(Error::InvalidArgument { op: "Graph::capture", .. })), "{r:?}");
    let y = on_stream(&side, || &x + 1.0)?;
    assert_eq!(y.to_vec()?, vec![2.0; 4], "`side` runs work again after the failed capture");
    Ok(())
}

#[test]
fn an_event_of_a_capture_cannot_be_waited_for_after_it() -> locus::Result<()> {
    let _one = serial();
    let (s, other) = (Stream::<G>::new()?, Stream::<G>::new()?);
    let mut x = Tensor::<G>::ones([4])?;
    let mut kept = None;
    let _g = Graph::capture(&s, &mut x, |x| {
        kept = Some(s.record_event()?);
        x + 1.0
    })?;
    let ev = kept.unwrap();
    assert!(matches!(other.wait_event(&ev), Err(Error::InvalidArgument { op: "event", .. })));
    assert!(matches!(ev.synchronize(), Err(Error::InvalidArgument { op: "event", .. })));
    Ok(())
}

#[test]
fn a_graph_on_a_run_time_device() -> locus::Result<()> {
    let _one = serial();
    let s = Stream::new_on(Dyn::new(DeviceId::Cuda(0)))?;
    let mut x = Tensor::<G>::ones([3])?.into_dyn();
    let mut g = Graph::capture(&s, &mut x, |x| x * 4.0)?;
    assert_eq!(g.replay()?.to_vec()?, vec![4.0; 3]);
    let mut wrong = Tensor::<Cuda<0>>::ones([3])?.into_dyn();
    if let Ok(s1) = Stream::new_on(Dyn::new(DeviceId::Cuda(1))) {
        let r = Graph::capture(&s1, &mut wrong, |x| x * 1.0);
        assert!(matches!(r, Err(Error::DeviceMismatch { op: "Graph::capture", .. })), "{r:?}");
        assert!(matches!(g.replay_on(&s1), Err(Error::DeviceMismatch { op: "Graph::replay_on", .. })));
    }
    Ok(())
}

#[test]
fn matmul_and_reductions_replay_like_eager_ops() -> locus::Result<()> {
    let _one = serial();
    let s = Stream::<G>::new()?;
    let mut x = Tensor::<G>::rand([8, 16], 1)?;
    let mut w = Tensor::<G>::rand([16, 4], 2)?;
    let mut g = Graph::capture(&s, (&mut x, &mut w), |(x, w)| {
        let h = x.matmul(w)?.relu()?;
        Ok((h.sum_dim(0, false)?, h.sum()?))
    })?;
    for seed in 3..6 {
        let (nx, nw) = (Tensor::<G>::rand([8, 16], seed)?, Tensor::<G>::rand([16, 4], seed + 10)?);
        let (mut ix, mut iw) = g.inputs_mut();
        ix.copy_from(&nx)?;
        iw.copy_from(&nw)?;
        let (cols, total) = g.replay()?;
        let h = nx.matmul(&nw)?.relu()?;
        assert_eq!(cols.to_vec()?, h.sum_dim(0, false)?.to_vec()?);
        assert_eq!(total.item()?, h.sum()?.item()?);
    }
    Ok(())
}

#[test]
fn collectives_cannot_be_captured() -> locus::Result<()> {
    let _one = serial();
    if !locus::testing::needs_devices(2)? {
        return Ok(());
    }
    let other = Tensor::<Cuda<1>>::ones([4])?;
    let s = Stream::<G>::new()?;
    let mut x = Tensor::<G>::ones([4])?;
    let mut refused = None;
    let _g = Graph::capture(&s, &mut x, |x| {
        refused = Some(not_capturable(locus::parallel::all_reduce_sum(&(x.clone(), other.clone()))));
        x + 1.0
    });
    assert!(refused.is_some_and(|op| op.contains("collective") || op.contains("copy")), "{refused:?}");
    Ok(())
}

/// A graph whose inputs hold indices (an `index_select`'s ids, a `cross_entropy`'s
/// targets) checks them on the device before a replay only when they were not checked
/// where they were written from: after `copy_from` (checked in the source) and
/// `copy_from_slice` (checked on the host) replays take those verdicts, so they need not
/// wait for the replay before; a bad index written either way is still the replay's
/// error, the eager op's, and the graph does not run; a write of another input keeps the
/// verdict of the ids.
#[test]
fn replays_take_the_verdicts_of_checked_writes_of_their_index_inputs() -> locus::Result<()> {
    let _one = serial(); // its tensors would move the memory counts other tests here take
    let s = Stream::<G>::new()?;
    let values = vec![0.0, 1.0, 2.0, 2.0, 1.0, 0.0, 5.0, 5.0];
    let eager = Tensor::<G>::from_vec(values.clone(), [4, 2])?;
    let (mut logits, mut ids) =
        (Tensor::<G>::from_vec(values, [4, 2])?, Tensor::<G, i32>::from_vec(vec![1, 0, 1, 1], [4])?);
    let mut g = Graph::capture(&s, (&mut logits, &mut ids), |(logits, ids)| {
        Ok((logits.index_select(0, ids)?, logits.cross_entropy(ids)?))
    })?;
    let want = |ids: &[i32]| -> locus::Result<(Vec<f32>, Vec<f32>)> {
        let ids = Tensor::<G, i32>::from_vec(ids.to_vec(), [4])?;
        Ok((eager.index_select(0, &ids)?.to_vec()?, eager.cross_entropy(&ids)?.to_vec()?))
    };
    let read = |(rows, loss): (locus::Output<'_, G>, locus::Output<'_, G>)| -> locus::Result<(Vec<f32>, Vec<f32>)> {
        Ok((rows.to_vec()?, loss.to_vec()?))
    };
    let before = locus::replay_index_checks();
    assert_eq!(read(g.replay()?)?, want(&[1, 0, 1, 1])?);
    assert_eq!(locus::replay_index_checks() - before, 1, "the ids as captured are checked before the replay");
    g.inputs_mut().1.copy_from(&Tensor::<G, i32>::from_vec(vec![0, 1, 1, 0], [4])?)?;
    for _ in 0..3 {
        assert_eq!(read(g.replay()?)?, want(&[0, 1, 1, 0])?);
    }
    g.inputs_mut().1.copy_from_slice(&[1, 1, 0, 1])?;
    assert_eq!(read(g.replay()?)?, want(&[1, 1, 0, 1])?);
    g.inputs_mut().0.copy_from_slice(&[1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 0.0, 3.0])?;
    let moved = Tensor::<G>::from_vec(vec![1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 0.0, 3.0], [4, 2])?;
    let (rows, _) = read(g.replay()?)?;
    assert_eq!(rows, moved.index_select(0, &Tensor::<G, i32>::from_vec(vec![1, 1, 0, 1], [4])?)?.to_vec()?);
    assert_eq!(locus::replay_index_checks() - before, 1, "every later replay took the verdicts of the writes");
    let last = read(g.outputs()?)?;
    let bad = vec![0, 1, 9, 0];
    let eager_e = moved.index_select(0, &Tensor::<G, i32>::from_vec(bad.clone(), [4])?).map(|_| ()).unwrap_err();
    g.inputs_mut().1.copy_from(&Tensor::<G, i32>::from_vec(bad.clone(), [4])?)?;
    assert_eq!(g.replay().map(|_| ()).unwrap_err(), eager_e, "written by copy_from");
    assert_eq!(read(g.outputs()?)?, last, "the graph did not run");
    g.inputs_mut().1.copy_from_slice(&[0, 1, 3, -1])?;
    let e = g.replay().map(|_| ()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { op: "index_select", .. }), "written by copy_from_slice: {e}");
    assert_eq!(read(g.outputs()?)?, last, "the graph did not run");
    assert_eq!(locus::replay_index_checks() - before, 1);
    g.inputs_mut().1.copy_from(&Tensor::<G, i32>::from_vec(vec![1, 0, 0, 1], [4])?)?;
    let (rows, _) = read(g.replay()?)?;
    assert_eq!(rows, moved.index_select(0, &Tensor::<G, i32>::from_vec(vec![1, 0, 0, 1], [4])?)?.to_vec()?);
    Ok(())
}

/// Opened by [`writing_the_inputs_waits_for_no_replay`] once it has seen what it waits
/// for: `hold`'s host fallback waits for it (at most its `ns`, so that a failing test ends).
static GATE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

fn hold_host(y: &mut [f32], ns: u64) {
    let until = std::time::Instant::now() + std::time::Duration::from_nanos(ns);
    while !GATE.load(std::sync::atomic::Ordering::SeqCst) && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    y[0] += 1.0;
}

/// Adds 1 to `y[0]` after `ns` nanoseconds on the GPU; on the host backend, once the
/// test opens [`GATE`].
#[kernel(
    host = hold_host,
    source = r#"extern "C" __global__ void hold(float* y, unsigned long long ns) {
        unsigned long long start, now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
        do {
            __nanosleep(1000);
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        } while (now - start < ns);
        y[0] += 1.0f;
    }"#
)]
fn hold<D: Device>(y: &mut Tensor<D>, ns: u64);

/// What one round of [`writing_the_inputs_waits_for_no_replay`] saw.
enum Seen {
    /// The replay was complete before the writes began: launches are synchronous
    /// (CUDA_LAUNCH_BLOCKING=1), so no wait could be seen.
    Synchronous,
    /// A kernel on another stream could not run beside the replay: the device runs one
    /// kernel at a time (compute-sanitizer's memcheck serializes them), so the checks
    /// of the new indices wait for the replay whatever locus does.
    Serialized,
    /// The replay was still running once the writes had returned: they did not wait.
    NotWaited,
    /// The replay had ended by the time the writes returned: they waited, or were slower
    /// than the replay's hold.
    Ended,
}

/// One round: a graph whose replay holds its stream for `hold_ns` on the GPU (on the
/// host backend until [`GATE`] opens), new batches written into its inputs while the
/// replay runs, and the values both replays read checked.
fn write_during_replay(hold_ns: u64) -> locus::Result<Seen> {
    let s = Stream::<G>::new()?;
    let values: Vec<f32> = (0..16).map(|i| (i % 5) as f32).collect();
    let eager = Tensor::<G>::from_vec(values.clone(), [8, 2])?;
    let (mut table, mut ids, mut targets) =
        (Tensor::<G>::from_vec(values, [8, 2])?, Tensor::<G, i32>::zeros([3])?, Tensor::<G, i32>::zeros([3])?);
    let mut g = Graph::capture(&s, (&mut table, &mut ids, &mut targets), |(t, i, k)| {
        let mut held = Tensor::<G>::zeros([1])?;
        hold(&mut held, hold_ns).grid(Grid::new([1, 1, 1], [1, 1, 1])).launch()?;
        Ok((t.index_select(0, i)?.cross_entropy(k)?, held))
    })?;
    let loss = |ids: Vec<i32>, targets: Vec<i32>| -> locus::Result<f32> {
        let (i, k) = (Tensor::<G, i32>::from_vec(ids, [3])?, Tensor::<G, i32>::from_vec(targets, [3])?);
        eager.index_select(0, &i)?.cross_entropy(&k)?.item()
    };
    let (old, new) = ((vec![1, 7, 2], vec![1, 0, 1]), (vec![3, 3, 6], vec![0, 1, 1]));
    {
        let (_, mut i, mut k) = g.inputs_mut();
        i.copy_from(&Tensor::<G, i32>::from_vec(old.0.clone(), [3])?)?;
        k.copy_from(&Tensor::<G, i32>::from_vec(old.1.clone(), [3])?)?;
    }
    let (next_ids, next_targets) =
        (Tensor::<G, i32>::from_vec(new.0.clone(), [3])?, Tensor::<G, i32>::from_vec(new.1.clone(), [3])?);
    GATE.store(false, std::sync::atomic::Ordering::SeqCst);
    // The first loss, copied on the replay's stream (on the current one the copy would wait
    // for the replay, and the checks of the sources there for the copy).
    let first = on_stream(&s, || g.replay()?.0.to::<G>())?;
    let replayed = Event::<G>::new()?;
    replayed.record(&s)?;
    let synchronous = replayed.is_complete()?;
    // Can another stream's kernel run while the replay holds its stream?
    let serialized = !synchronous && {
        let other = Stream::<G>::new()?;
        let probe = on_stream(&other, || Tensor::<G>::zeros([1]))?;
        other.synchronize()?;
        drop(probe);
        replayed.is_complete()?
    };
    {
        let (_, mut i, mut k) = g.inputs_mut();
        i.copy_from(&next_ids)?;
        k.copy_from(&next_targets)?;
    }
    let ended = replayed.is_complete()?;
    GATE.store(true, std::sync::atomic::Ordering::SeqCst);
    let (second, held) = g.replay()?;
    let (second, held) = (second.item()?, held.item()?);
    assert_eq!(first.item()?, loss(old.0, old.1)?, "the first replay read the old batch");
    assert_eq!(second, loss(new.0, new.1)?, "the second replay read the new batch");
    assert_eq!(held, 1.0, "each replay ran `hold` once on its own output");
    Ok(match (synchronous, serialized, ended) {
        (true, _, _) => Seen::Synchronous,
        (false, true, _) => Seen::Serialized,
        (false, false, false) => Seen::NotWaited,
        (false, false, true) => Seen::Ended,
    })
}

/// New batches are written into a graph's inputs while the replay before them still runs:
/// the writes queue behind it on its stream, and neither they nor the checks of their
/// indices wait for it on the host (nor does the current stream, where the second check
/// runs, hold a copy that waits for it). The replays still read what they should: the
/// first the old batch, the next the new one.
///
/// Writes that took longer than the replay's hold (compute-sanitizer makes every call
/// slow) look the same as writes that waited, so a round that saw the replay ended is
/// tried again with a hold ten times longer: writes that wait wait for that one too, slow
/// ones do not grow with it. Only the last, a 20 s hold, fails the test. Where a kernel on
/// a fresh stream cannot run beside the replay (compute-sanitizer's memcheck runs one kernel
/// at a time: seen on an H100, all three rounds ended), no wait can be told from the
/// device's own, and the round says so instead.
#[test]
fn writing_the_inputs_waits_for_no_replay() -> locus::Result<()> {
    let _one = serial();
    for hold_ns in [200_000_000, 2_000_000_000, 20_000_000_000] {
        match write_during_replay(hold_ns)? {
            Seen::NotWaited => return Ok(()),
            Seen::Synchronous => {
                eprintln!(
                    "skipped the wait check: the replay of a {} ms kernel had completed when its launch returned \
                     (synchronous launches: compute-sanitizer or CUDA_LAUNCH_BLOCKING); the values are still checked",
                    hold_ns / 1_000_000
                );
                return Ok(());
            }
            Seen::Serialized => {
                eprintln!(
                    "skipped the wait check: a kernel on another stream waited for the replay of a {} ms kernel \
                     (the device runs one kernel at a time, as under compute-sanitizer's memcheck); the values are \
                     still checked",
                    hold_ns / 1_000_000
                );
                return Ok(());
            }
            Seen::Ended => {
                eprintln!("the replay of a {} ms hold ended before the writes returned; longer", hold_ns / 1_000_000)
            }
        }
    }
    panic!("writing the inputs waited for the replay before them (held 20 s)");
}
