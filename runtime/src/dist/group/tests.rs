use super::*;
use crate::device::{Cpu, Cuda, Dyn};
use crate::dist::FileStore;
use std::thread;
use std::time::Instant;

fn fresh_store(name: &str, timeout: Duration) -> (Arc<dyn Store>, std::path::PathBuf) {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let dir = std::env::temp_dir().join(format!("locus-group-{name}-{}-{nanos}", std::process::id()));
    (Arc::new(FileStore::new(&dir, timeout).unwrap()), dir)
}

/// Runs `f(group)` on `world` threads, one rank each; the results by rank.
fn on_ranks<R: Send + 'static>(
    name: &str,
    world: usize,
    timeout: Duration,
    f: impl Fn(ProcessGroup) -> R + Send + Sync + 'static,
) -> Vec<R> {
    let (store, dir) = fresh_store(name, Duration::from_secs(20));
    let f = Arc::new(f);
    let handles: Vec<_> = (0..world)
        .map(|rank| {
            let (store, f) = (Arc::clone(&store), Arc::clone(&f));
            thread::spawn(move || f(ProcessGroup::new(store, rank, world, timeout).unwrap()))
        })
        .collect();
    let out = handles.into_iter().map(|h| h.join().unwrap()).collect();
    std::fs::remove_dir_all(dir).ok();
    out
}

#[test]
fn collectives_on_three_threads() {
    let results = on_ranks("three", 3, Duration::from_secs(20), |pg| {
        let r = pg.rank() as f32;
        let t = Tensor::<Cpu>::from_vec(vec![r, 10.0 * r, -r, 0.5], [2, 2]).unwrap();
        let sum = pg.all_reduce(&t, ReduceOp::Sum).unwrap().to_vec().unwrap();
        let max = pg.all_reduce(&t, ReduceOp::Max).unwrap().to_vec().unwrap();
        let min = pg.all_reduce(&t, ReduceOp::Min).unwrap().to_vec().unwrap();
        let avg = pg.all_reduce(&t, ReduceOp::Avg).unwrap().to_vec().unwrap();
        let b = pg.broadcast(&Tensor::<Cuda<0>, i32>::full([3], pg.rank() as i32 + 7).unwrap(), 2).unwrap();
        let g = pg.all_gather(&Tensor::<Cpu, u8>::full([1], pg.rank() as u8).unwrap()).unwrap();
        let rs = pg
            .reduce_scatter(&Tensor::<Cpu, i32>::arange(0, 6, 1).unwrap().reshape([3, 2]).unwrap(), ReduceOp::Sum)
            .unwrap();
        pg.barrier().unwrap();
        (sum, max, min, avg, b.to_vec().unwrap(), g.iter().map(|x| x.to_vec().unwrap()[0]).collect::<Vec<_>>(), {
            assert_eq!(rs.shape(), &[1, 2]);
            rs.to_vec().unwrap()
        })
    });
    for (rank, (sum, max, min, avg, b, g, rs)) in results.into_iter().enumerate() {
        assert_eq!(sum, vec![3.0, 30.0, -3.0, 1.5]);
        assert_eq!(max, vec![2.0, 20.0, 0.0, 0.5]);
        assert_eq!(min, vec![0.0, 0.0, -2.0, 0.5]);
        assert_eq!(avg, vec![1.0, 10.0, -1.0, 0.5]);
        assert_eq!(b, vec![9; 3]);
        assert_eq!(g, vec![0, 1, 2]);
        assert_eq!(rs, vec![6 * rank as i32, 6 * rank as i32 + 3]);
    }
}

#[test]
fn send_and_recv_between_two_threads_on_dyn() {
    let out = on_ranks("p2p", 2, Duration::from_secs(20), |pg| {
        let dev = Dyn::new(crate::device::DeviceId::Cpu);
        if pg.rank() == 0 {
            pg.send(&Tensor::<Dyn, f64>::from_vec_on(dev, vec![1.5, 2.5], [2]).unwrap(), 1).unwrap();
            let e = pg.recv_on::<Dyn, f64>(dev, 0, [2]).unwrap_err().to_string();
            assert!(e.contains("this rank itself"), "{e}");
            None
        } else {
            let wrong = pg.recv::<Cpu, f64>(0, [3]);
            let e = wrong.unwrap_err().to_string();
            assert!(e.contains("rank 0 has shape [2] but rank 1 has shape [3]"), "{e}");
            // The group broke: every later call says so.
            let e = pg.barrier().unwrap_err().to_string();
            assert!(e.contains("broke"), "{e}");
            Some(())
        }
    });
    assert_eq!(out, vec![None, Some(())]);
}

#[test]
fn mismatched_shapes_types_and_orders_name_the_ranks() {
    let errs = on_ranks("mismatch", 2, Duration::from_secs(20), |pg| {
        let n = pg.rank() + 2;
        pg.all_reduce(&Tensor::<Cpu>::zeros([n]).unwrap(), ReduceOp::Sum).unwrap_err().to_string()
    });
    assert!(errs[0].contains("rank 1 has shape [3] but rank 0 has shape [2]"), "{}", errs[0]);
    assert!(errs[1].contains("rank 0 has shape [2] but rank 1 has shape [3]"), "{}", errs[1]);

    let errs = on_ranks("order", 2, Duration::from_secs(20), |pg| {
        if pg.rank() == 0 {
            pg.barrier().unwrap_err().to_string()
        } else {
            pg.all_reduce(&Tensor::<Cpu, u8>::zeros([1]).unwrap(), ReduceOp::Max).unwrap_err().to_string()
        }
    });
    assert!(errs[0].contains("rank 1 sent a `all_reduce` message while rank 0 is in `barrier`"), "{}", errs[0]);
    assert!(errs[1].contains("rank 0 sent a `barrier` message"), "{}", errs[1]);

    let errs = on_ranks("dtype", 2, Duration::from_secs(20), |pg| {
        if pg.rank() == 0 {
            pg.all_gather(&Tensor::<Cpu, i32>::zeros([1]).unwrap()).unwrap_err().to_string()
        } else {
            pg.all_gather(&Tensor::<Cpu, f32>::zeros([1]).unwrap()).unwrap_err().to_string()
        }
    });
    assert!(errs[0].contains("rank 1 has f32 elements but rank 0 has i32"), "{}", errs[0]);

    // 16-bit payloads are read past too, so both ranks see the other's view.
    let errs = on_ranks("dtype16", 2, Duration::from_secs(20), |pg| {
        if pg.rank() == 0 {
            pg.all_gather(&Tensor::<Cpu, half::bf16>::zeros([4096]).unwrap()).unwrap_err().to_string()
        } else {
            pg.all_gather(&Tensor::<Cpu, f32>::zeros([4096]).unwrap()).unwrap_err().to_string()
        }
    });
    assert!(errs[0].contains("rank 1 has f32 elements but rank 0 has bf16"), "{}", errs[0]);
    assert!(errs[1].contains("rank 0 has bf16 elements but rank 1 has f32"), "{}", errs[1]);
}

#[test]
fn a_world_size_mismatch_names_both_ranks_and_sizes() {
    let (store, dir) = fresh_store("world", Duration::from_secs(2));
    let s1 = Arc::clone(&store);
    let other = thread::spawn(move || ProcessGroup::new(s1, 1, 2, Duration::from_secs(5)).unwrap_err().to_string());
    let e0 = ProcessGroup::new(store, 0, 3, Duration::from_secs(5)).unwrap_err().to_string();
    let e1 = other.join().unwrap();
    assert!(e0.contains("rank 1 has world size 2 but rank 0 has 3"), "{e0}");
    assert!(e1.contains("rank 0 has world size 3 but rank 1 has 2"), "{e1}");
    std::fs::remove_dir_all(dir).ok();
}

#[test]
fn a_peer_that_stops_answering_is_an_error_after_the_timeout() {
    let timeout = Duration::from_millis(200);
    let out = on_ranks("stuck", 2, timeout, move |pg| {
        if pg.rank() == 1 {
            // Alive but never calls the collective; keeps the group until rank 0 is done.
            thread::sleep(Duration::from_secs(2));
            return None;
        }
        let t = Instant::now();
        let e = pg.all_reduce(&Tensor::<Cpu>::ones([4]).unwrap(), ReduceOp::Sum).unwrap_err();
        Some((t.elapsed(), e.to_string()))
    });
    let (elapsed, e) = out[0].clone().unwrap();
    assert!(elapsed >= timeout && elapsed < Duration::from_millis(1500), "{elapsed:?}");
    assert!(e.contains("rank 1 did not answer within"), "{e}");
}

#[test]
fn a_dropped_peer_is_an_error_at_once() {
    let out = on_ranks("dropped", 3, Duration::from_secs(10), |pg| {
        pg.barrier().unwrap();
        if pg.rank() == 2 {
            drop(pg);
            return None;
        }
        let t = Instant::now();
        let e = pg.all_reduce(&Tensor::<Cpu>::ones([4]).unwrap(), ReduceOp::Sum).unwrap_err();
        Some((t.elapsed(), e.to_string()))
    });
    for (elapsed, e) in out.into_iter().flatten() {
        assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
        assert!(e.contains("rank 2 closed the connection"), "{e}");
        assert!(!e.contains("rank 0 ") && !e.contains("rank 1 "), "only rank 2 failed: {e}");
    }
}

#[test]
fn arguments_are_checked_before_talking() {
    let out = on_ranks("args", 1, Duration::from_secs(5), |pg| {
        let t = Tensor::<Cpu, u8>::from_vec(vec![1, 2], [2]).unwrap();
        assert_eq!(pg.all_reduce(&t, ReduceOp::Avg).unwrap().to_vec().unwrap(), vec![1, 2]);
        assert!(pg.broadcast(&t, 1).is_err());
        assert!(pg.send(&t, 0).is_err());
        assert_eq!(pg.reduce_scatter(&t, ReduceOp::Sum).unwrap().to_vec().unwrap(), vec![1, 2]);
        assert!(pg.reduce_scatter(&Tensor::<Cpu>::ones(Vec::<usize>::new()).unwrap(), ReduceOp::Sum).is_err());
        assert_eq!(pg.all_gather(&t).unwrap().len(), 1);
        pg.barrier().unwrap();
    });
    assert_eq!(out.len(), 1);
    let (store, dir) = fresh_store("bad", Duration::from_secs(1));
    assert!(ProcessGroup::new(Arc::clone(&store), 2, 2, Duration::from_secs(1)).is_err());
    assert!(ProcessGroup::new(store, 0, 1, Duration::ZERO).is_err());
    std::fs::remove_dir_all(dir).ok();
}
