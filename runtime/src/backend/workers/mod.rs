//! The process's one pool of long-lived worker threads (starting threads per copy or per
//! kernel costs more than the work saves), for staged copies and for the host backend's
//! kernels and copies above a size threshold: [`on_copiers`] runs the parts of one piece
//! of work on them and on the calling thread, and returns when all parts have, with the
//! first error or a panic as an `Err`; [`split_mut`] cuts an output into such parts.
//!
//! `LOCUS_HOST_THREADS` sets how many threads host work is split over (default: the
//! available parallelism), `LOCUS_COPY_THREADS` how many a staged copy uses (default: the
//! cores, at most 8); the pool holds the larger number, counting the caller's thread.
//! A part never waits for another part, and work started on a pool thread runs all its
//! parts on that thread, so no part can wait for a thread that waits for it.

use std::cell::Cell;
use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex};
use std::time::{Duration, Instant};

use crate::error::{panic_message, Error, Result};

/// The threads a copy uses, counting the caller's.
pub(crate) fn copy_threads() -> usize {
    COPIERS.copy_threads.min(COPIERS.threads.load(Ordering::Relaxed) + 1)
}

/// The threads host kernels and copies split their work over, counting the caller's.
pub(crate) fn host_threads() -> usize {
    COPIERS.host_threads.min(COPIERS.threads.load(Ordering::Relaxed) + 1)
}

thread_local! {
    /// Set on the pool's own threads: work started there runs its parts in place.
    static IN_POOL: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f(start, chunk)` for contiguous chunks of `out` that together cover it, each a
/// whole number of `unit` elements (but the last) and at least `grain` units long, on
/// up to [`host_threads`] threads; returns the first error. Below two grains it is one
/// call on this thread.
pub(crate) fn split_mut<T: Send>(
    out: &mut [T],
    unit: usize,
    grain: usize,
    f: &(dyn Fn(usize, &mut [T]) -> Result<()> + Sync),
) -> Result<()> {
    let unit = unit.max(1);
    let units = out.len().div_ceil(unit);
    let parts = (units / grain.max(1)).min(host_threads()).max(1);
    if parts == 1 {
        return f(0, out);
    }
    let per = units.div_ceil(parts) * unit;
    let chunks: Vec<Mutex<&mut [T]>> = out.chunks_mut(per).map(Mutex::new).collect();
    on_copiers(chunks.len(), &|i| {
        let mut chunk = chunks[i].lock().unwrap_or_else(|p| p.into_inner());
        f(i * per, &mut chunk)
    })
}

/// Runs `f(0)` on this thread and `f(1)` .. `f(n - 1)` on the copy threads, and returns
/// once all have: the first error, or `Error::Panicked` for a panic.
pub(crate) fn on_copiers(n: usize, f: &(dyn Fn(usize) -> Result<()> + Sync)) -> Result<()> {
    if IN_POOL.with(Cell::get) {
        // A part that splits again would wait for pool threads that may all be waiting
        // the same way: run every part here instead.
        return (0..n).map(|i| caught(|| f(i))).find(Result::is_err).unwrap_or(Ok(()));
    }
    let latch = Arc::new(Latch { state: Mutex::new((n.saturating_sub(1), Ok(()))), done: Condvar::new() });
    // SAFETY: the jobs borrow `f` beyond what the compiler can see, but this function
    // returns only after every job has run and counted the latch down (a job catches its
    // own panic first), so `f` outlives them all.
    let shared: &'static (dyn Fn(usize) -> Result<()> + Sync) = unsafe { std::mem::transmute(f) };
    for i in 1..n {
        let latch = Arc::clone(&latch);
        let job: Job = Box::new(move || latch.count_down(caught(|| shared(i))));
        if let Err(unsent) = COPIERS.send(job) {
            unsent(); // no pool thread: run it here
        }
    }
    let here = if n > 0 { caught(|| f(0)) } else { Ok(()) };
    here.and(latch.wait())
}

/// Queues `job` on a copy thread and returns at once, without waiting for it to start
/// or end: for help the caller can do without (the inline upload's helpers, which must
/// not make the caller wait for a thread to wake). `false` when no copy thread can take
/// it. A panic in the job is caught there, and the thread lives on.
pub(crate) fn detach(job: Box<dyn FnOnce() + Send>) -> bool {
    if copy_threads() < 2 {
        return false;
    }
    COPIERS
        .send(Box::new(move || {
            let _ = catch_unwind(AssertUnwindSafe(job));
        }))
        .is_ok()
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

/// The pool: a queue of parts and the threads that take them.
struct Copiers {
    queue: Mutex<Queue>,
    /// Signalled when a job is queued while a thread sleeps.
    work: Condvar,
    /// Jobs in the queue: what a spinning thread watches, without taking the lock.
    pending: AtomicUsize,
    /// The pool threads that started.
    threads: AtomicUsize,
    /// The threads a copy uses, counting the caller's.
    copy_threads: usize,
    /// The threads host work is split over, counting the caller's.
    host_threads: usize,
}

/// The queue and how many threads sleep on it.
struct Queue {
    jobs: VecDeque<Job>,
    sleepers: usize,
}

impl Copiers {
    /// Queues `job`; `Err` with it when no pool thread exists to take it.
    fn send(&self, job: Job) -> std::result::Result<(), Job> {
        if self.threads.load(Ordering::Relaxed) == 0 {
            return Err(job);
        }
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        q.jobs.push_back(job);
        self.pending.fetch_add(1, Ordering::Release);
        if q.sleepers > 0 {
            self.work.notify_one();
        }
        Ok(())
    }

    /// The next job for a pool thread: it watches the queue for `spin` first (a job
    /// queued meanwhile starts without a wake-up), then sleeps until one comes.
    fn next(&self, spin: Duration) -> Job {
        if !spin.is_zero() {
            let start = Instant::now();
            let mut turns = 0u32;
            loop {
                if self.pending.load(Ordering::Acquire) > 0 {
                    if let Some(job) = self.pop(&mut self.queue.lock().unwrap_or_else(|p| p.into_inner())) {
                        return job;
                    }
                }
                turns = turns.wrapping_add(1);
                if turns % 64 == 0 && start.elapsed() >= spin {
                    break;
                }
                std::hint::spin_loop();
            }
        }
        let mut q = self.queue.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(job) = self.pop(&mut q) {
                return job;
            }
            q.sleepers += 1;
            q = self.work.wait(q).unwrap_or_else(|p| p.into_inner());
            q.sleepers -= 1;
        }
    }

    fn pop(&self, q: &mut Queue) -> Option<Job> {
        let job = q.jobs.pop_front()?;
        self.pending.fetch_sub(1, Ordering::Release);
        Some(job)
    }
}

/// How long a pool thread watches the queue after its last job before it sleeps, by
/// default: [`DEFAULT_POOL_SPIN`], where there are more than [`SPIN_MIN_CORES`] cores.
static POOL_SPIN_NS: LazyLock<AtomicU64> = LazyLock::new(|| AtomicU64::new(default_pool_spin().as_nanos() as u64));

/// The watch locus uses on this machine (see [`POOL_SPIN_NS`]).
pub(crate) fn default_pool_spin() -> Duration {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    if cores > SPIN_MIN_CORES {
        DEFAULT_POOL_SPIN
    } else {
        Duration::ZERO
    }
}

/// A pool thread's watch after a job: a job that comes within it starts at once, where
/// a sleeping thread takes a wake-up (tens of microseconds on a busy or virtual machine)
/// first. Back-to-back copies of a MiB are that far apart. The GPU bench's
/// `h2d_pageable_inline_p256KiB_h2_*` (this watch) and `h2d_pageable_inline_nospin_*`
/// rows measure the choice: on the H200 machine (16 cores) over 8 runs, the watch was
/// faster at 4 MiB in every run (median 27.1 against 25.2 GB/s) and no different at
/// 1 MiB (15.9 against 16.2, both ranging 12 to 19).
pub(crate) const DEFAULT_POOL_SPIN: Duration = Duration::from_micros(200);

/// With this many cores or fewer the pool threads never spin: a spinning thread there
/// takes a core the work itself needs (CI's two-core machines).
pub(crate) const SPIN_MIN_CORES: usize = 4;

/// The pool threads' watch now (see [`DEFAULT_POOL_SPIN`]).
pub(crate) fn pool_spin() -> Duration {
    Duration::from_nanos(POOL_SPIN_NS.load(Ordering::Relaxed))
}

/// Sets the pool threads' watch after each job (zero: they sleep at once); returns the
/// previous one. Threads watching now keep their old watch until it ends.
pub(crate) fn set_pool_spin(spin: Duration) -> Duration {
    let ns = u64::try_from(spin.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(POOL_SPIN_NS.swap(ns, Ordering::Relaxed))
}

/// The most threads either variable may ask for.
const MAX_THREADS: usize = 256;

/// `name` as a thread count in `1..=MAX_THREADS`: `Ok(None)` when unset, an error naming
/// the variable when it is not such a count (the host backend reports it; the pool then
/// uses the default).
pub(crate) fn thread_count_var(name: &str) -> std::result::Result<Option<usize>, String> {
    parse_thread_count(name, std::env::var(name).ok().as_deref())
}

/// [`thread_count_var`] of a value of `name` (`None`: unset).
fn parse_thread_count(name: &str, v: Option<&str>) -> std::result::Result<Option<usize>, String> {
    let Some(v) = v else { return Ok(None) };
    match v.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_THREADS).contains(&n) => Ok(Some(n)),
        _ => Err(format!("{name}=`{v}` is not a thread count from 1 to {MAX_THREADS}")),
    }
}

static COPIERS: LazyLock<Arc<Copiers>> = LazyLock::new(|| {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let copy_threads = thread_count_var("LOCUS_COPY_THREADS").ok().flatten().unwrap_or(cores.min(8));
    let host_threads = thread_count_var("LOCUS_HOST_THREADS").ok().flatten().unwrap_or(cores.min(MAX_THREADS));
    let pool = Arc::new(Copiers {
        queue: Mutex::new(Queue { jobs: VecDeque::new(), sleepers: 0 }),
        work: Condvar::new(),
        pending: AtomicUsize::new(0),
        threads: AtomicUsize::new(0),
        copy_threads,
        host_threads,
    });
    let mut started = 0;
    for i in 1..copy_threads.max(host_threads) {
        let pool = Arc::clone(&pool);
        // A thread that does not start leaves its jobs to the others.
        let spawned = std::thread::Builder::new().name(format!("locus-pool-{i}")).spawn(move || {
            IN_POOL.with(|p| p.set(true));
            loop {
                pool.next(pool_spin())();
            }
        });
        started += usize::from(spawned.is_ok());
    }
    pool.threads.store(started, Ordering::Relaxed);
    pool
});

#[cfg(test)]
mod tests;
