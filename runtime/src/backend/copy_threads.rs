//! A few long-lived threads for host-side copies (starting threads per copy costs more
//! than the copy saves): [`on_copiers`] runs the parts of one copy on them and on the
//! calling thread, and returns when all parts have, with the first error or a panic as
//! an `Err`. `LOCUS_COPY_THREADS` sets the count (default: the cores, at most 8).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, LazyLock, Mutex};

use crate::error::{panic_message, Error, Result};

/// The threads a copy uses, counting the caller's.
pub(crate) fn copy_threads() -> usize {
    COPIERS.threads
}

/// Runs `f(0)` on this thread and `f(1)` .. `f(n - 1)` on the copy threads, and returns
/// once all have: the first error, or `Error::Panicked` for a panic.
pub(crate) fn on_copiers(n: usize, f: &(dyn Fn(usize) -> Result<()> + Sync)) -> Result<()> {
    let latch = Arc::new(Latch { state: Mutex::new((n.saturating_sub(1), Ok(()))), done: Condvar::new() });
    // SAFETY: the jobs borrow `f` beyond what the compiler can see, but this function
    // returns only after every job has run and counted the latch down (a job catches its
    // own panic first), so `f` outlives them all.
    let shared: &'static (dyn Fn(usize) -> Result<()> + Sync) = unsafe { std::mem::transmute(f) };
    for i in 1..n {
        let latch = Arc::clone(&latch);
        let job: Job = Box::new(move || latch.count_down(caught(|| shared(i))));
        if let Err(unsent) = COPIERS.send(job) {
            (unsent.0)(); // no copy thread: run it here
        }
    }
    let here = if n > 0 { caught(|| f(0)) } else { Ok(()) };
    here.and(latch.wait())
}

fn caught(f: impl FnOnce() -> Result<()>) -> Result<()> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|p| Err(Error::Panicked { message: panic_message(&*p) }))
}

/// Counts finished jobs down to zero and keeps the first error.
struct Latch {
    state: Mutex<(usize, Result<()>)>,
    done: Condvar,
}

impl Latch {
    fn count_down(&self, outcome: Result<()>) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.1.is_ok() {
            s.1 = outcome;
        }
        s.0 -= 1;
        if s.0 == 0 {
            self.done.notify_all();
        }
    }

    fn wait(&self) -> Result<()> {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while s.0 > 0 {
            s = self.done.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        std::mem::replace(&mut s.1, Ok(()))
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// A few long-lived threads for host-side copies (starting threads per copy costs more
/// than the copy saves).
struct Copiers {
    tx: Mutex<Sender<Job>>,
    /// The threads a copy uses, counting the caller's.
    threads: usize,
}

impl Copiers {
    fn send(&self, job: Job) -> std::result::Result<(), std::sync::mpsc::SendError<Job>> {
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).send(job)
    }
}

static COPIERS: LazyLock<Copiers> = LazyLock::new(|| {
    // LOCUS_COPY_THREADS tunes the count (default: the cores, at most 8).
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let threads = std::env::var("LOCUS_COPY_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(cores.min(8))
        .clamp(1, 64);
    let (tx, rx) = channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    for i in 1..threads {
        let rx = Arc::clone(&rx);
        // A thread that does not start leaves its jobs to the others (or to the caller).
        let _ = std::thread::Builder::new().name(format!("locus-copy-{i}")).spawn(move || loop {
            let job = match rx.lock().unwrap_or_else(|p| p.into_inner()).recv() {
                Ok(job) => job,
                Err(_) => return,
            };
            job();
        });
    }
    Copiers { tx: Mutex::new(tx), threads }
});

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

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
}
