//! Tests of the worker pool.

use std::sync::atomic::AtomicUsize;
use std::sync::mpsc::channel;

use crate::backend::workers::*;

#[test]
fn on_copiers_runs_every_part_once_and_reports_failures() {
    let hits: Vec<AtomicUsize> = (0..12).map(|_| AtomicUsize::new(0)).collect();
    on_copiers(hits.len(), &|i| {
        hits[i].fetch_add(1, Ordering::Relaxed);
        Ok(())
    })
    .unwrap();
    assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1));

    let failed = on_copiers(5, &|i| match i {
        3 => Err(Error::InvalidArgument { op: "copy", reason: "part 3".into() }),
        _ => Ok(()),
    });
    assert_eq!(failed, Err(Error::InvalidArgument { op: "copy", reason: "part 3".into() }));

    let panicked = on_copiers(4, &|i| if i == 2 { panic!("part {i}") } else { Ok(()) });
    assert_eq!(panicked, Err(Error::Panicked { message: "part 2".into() }));
    // The copy threads survive a panic in a job.
    on_copiers(4, &|_| Ok(())).unwrap();
}

#[test]
fn a_detached_job_runs_later_and_a_panic_in_one_leaves_the_thread_alive() {
    if copy_threads() < 2 {
        assert!(!detach(Box::new(|| {})), "no copy thread to take it");
        return;
    }
    let (tx, rx) = channel();
    assert!(detach(Box::new(|| panic!("a detached job"))));
    assert!(detach(Box::new(move || tx.send(7).expect("the test waits"))));
    assert_eq!(rx.recv_timeout(std::time::Duration::from_secs(30)), Ok(7));
}

/// A pool of its own with one thread, which takes `jobs` jobs watching `spin` after
/// each, and a count of the jobs run.
fn private_pool(spin: Duration, jobs: usize) -> (Arc<Copiers>, Arc<AtomicUsize>, std::thread::JoinHandle<()>) {
    let pool = Arc::new(Copiers {
        queue: Mutex::new(Queue { jobs: VecDeque::new(), sleepers: 0 }),
        work: Condvar::new(),
        pending: AtomicUsize::new(0),
        threads: AtomicUsize::new(1),
        copy_threads: 2,
        host_threads: 2,
    });
    let p = Arc::clone(&pool);
    let thread = std::thread::spawn(move || (0..jobs).for_each(|_| p.next(spin)()));
    (pool, Arc::new(AtomicUsize::new(0)), thread)
}

fn sleepers(pool: &Copiers) -> usize {
    pool.queue.lock().unwrap().sleepers
}

/// Waits (up to 30 s) until `cond` holds.
fn until(mut cond: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while !cond() {
        if start.elapsed() > Duration::from_secs(30) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

#[test]
fn a_pool_thread_watches_the_queue_after_a_job_and_sleeps_without_a_watch() {
    // A watch far longer than the test: the thread never sleeps between two jobs.
    let (pool, ran, thread) = private_pool(Duration::from_secs(60), 2);
    let count = |ran: &Arc<AtomicUsize>| -> Job {
        let ran = Arc::clone(ran);
        Box::new(move || {
            ran.fetch_add(1, Ordering::SeqCst);
        })
    };
    assert!(pool.send(count(&ran)).is_ok());
    assert!(until(|| ran.load(Ordering::SeqCst) == 1));
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(sleepers(&pool), 0, "the thread slept within its watch");
    assert!(pool.send(count(&ran)).is_ok());
    thread.join().unwrap();
    assert_eq!(ran.load(Ordering::SeqCst), 2);

    // No watch: the thread sleeps once the queue is empty, and a job wakes it.
    let (pool, ran, thread) = private_pool(Duration::ZERO, 2);
    assert!(until(|| sleepers(&pool) == 1), "the thread never slept");
    assert!(pool.send(count(&ran)).is_ok());
    assert!(until(|| ran.load(Ordering::SeqCst) == 1 && sleepers(&pool) == 1), "woken once, asleep again");
    assert!(pool.send(count(&ran)).is_ok());
    thread.join().unwrap();
    assert_eq!((ran.load(Ordering::SeqCst), pool.pending.load(Ordering::SeqCst)), (2, 0));
}

#[test]
fn the_watch_knob_gives_back_the_old_one() {
    let old = set_pool_spin(Duration::from_micros(7));
    assert_eq!(pool_spin(), Duration::from_micros(7));
    assert_eq!(set_pool_spin(old), Duration::from_micros(7));
}

#[test]
fn split_mut_covers_the_output_once_in_whole_units() {
    for (len, unit, grain) in [(0, 1, 1), (1, 1, 1), (1001, 1, 7), (1000, 10, 3), (1003, 10, 1), (5, 8, 1)] {
        let mut out = vec![0usize; len];
        split_mut(&mut out, unit, grain, &|start, chunk| {
            assert_eq!(start % unit, 0, "a chunk starts inside a unit");
            if start + chunk.len() < len {
                assert_eq!(chunk.len() % unit, 0, "a chunk but the last ends inside a unit");
                assert!(chunk.len() >= unit * grain, "a chunk below the grain");
            }
            for (i, o) in chunk.iter_mut().enumerate() {
                *o += start + i + 1;
            }
            Ok(())
        })
        .unwrap();
        assert!(out.iter().enumerate().all(|(i, &o)| o == i + 1), "{len} {unit} {grain}: {out:?}");
    }
    let e = split_mut(&mut [0u8; 1 << 12], 1, 1, &|start, _| {
        if start > 0 {
            return Err(Error::InvalidArgument { op: "split", reason: "late part".into() });
        }
        Ok(())
    });
    assert!(host_threads() == 1 || e.is_err(), "{e:?}");
}

#[test]
fn work_started_on_a_pool_thread_runs_its_parts_there() {
    let threads = host_threads().max(2);
    // Every part splits again: with nested parts queued behind busy threads this
    // would hang; run in place, it finishes.
    let total = AtomicUsize::new(0);
    on_copiers(threads, &|_| {
        on_copiers(threads, &|_| {
            total.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
    })
    .unwrap();
    assert_eq!(total.load(Ordering::Relaxed), threads * threads);
}

#[test]
fn thread_counts_never_panic_and_stay_from_1_to_the_cap() {
    use crate::env_fuzz;
    let values = env_fuzz::values(0x5448_5244, &["1", "8", "256", "257", "0"], env_fuzz::CASES);
    for name in ["LOCUS_HOST_THREADS", "LOCUS_COPY_THREADS"] {
        let n = env_fuzz::run(name, &values, |v| match parse_thread_count(name, Some(v)) {
            Ok(Some(n)) => {
                assert!((1..=MAX_THREADS).contains(&n), "`{v}` gave {n}");
                assert_eq!(v.trim().trim_start_matches('+').trim_start_matches('0'), n.to_string(), "`{v}` gave {n}");
            }
            Ok(None) => panic!("`{v}` read as unset"),
            Err(e) => env_fuzz::assert_clear(&e, name, v, &["thread count from 1 to 256"]),
        });
        assert!(n >= 4000, "{n} values");
        assert_eq!(parse_thread_count(name, None), Ok(None));
    }
}
