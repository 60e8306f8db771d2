//! The work queues of simulated streams: each stream is an in-order queue of jobs run by
//! its own worker thread (started with the first job, ended when the stream is dropped
//! and its queue has drained), so host code runs ahead of the "GPU" as it does with
//! CUDA. `LOCUS_HOST_STREAM_DELAY` delays every job on purpose, to widen race windows:
//! `N` sleeps N microseconds before each job, `0-N:SEED` a pseudo-random time from 0 to N
//! microseconds drawn from SEED; N is at most a second ([`MAX_DELAY_US`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use crate::device_id::DeviceId;
use crate::error::{Error, Result};
use crate::trace::{self, Track};

/// A unit of queued work; a graph's replays run a recorded job again.
pub(in crate::backend::host) type Job = Box<dyn FnMut() + Send + 'static>;

/// The queue one stream and its worker share.
#[derive(Debug)]
pub(crate) struct Queue {
    state: Mutex<State>,
    /// Signals the worker: a job arrived, or the stream closed.
    work: Condvar,
    /// Signals waiters: a job finished.
    finished: Condvar,
    device: DeviceId,
    name: String,
    /// Where its jobs go in a trace.
    track: Track,
}

/// An op's name and trace args.
type Named = (&'static str, String);

/// How many finished jobs' end times a queue keeps while a trace is written, for the
/// flow arrows of the waits that name them.
const RECENT: usize = 256;

#[derive(Default)]
struct State {
    /// Each job, with the name its slice has in a trace (none: not traced).
    jobs: VecDeque<(Job, Option<Named>)>,
    /// While a trace is written: the last traced jobs' numbers and end times.
    recent: VecDeque<(u64, Instant)>,
    /// Jobs queued so far; job `n` (from 1) is the n-th.
    pushed: u64,
    /// Jobs finished so far (they finish in order).
    done: u64,
    worker: bool,
    closed: bool,
    /// What the first failed job said (sticky, as a CUDA error is).
    failed: Option<String>,
    /// Events waiting for a job to finish, to stamp the time it did.
    stamps: Vec<(u64, Stamp)>,
}

/// When a stream reached an event; set once it has.
pub(in crate::backend::host) type Stamp = Arc<Mutex<Option<Instant>>>;

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "State {{ pushed: {}, done: {}, closed: {} }}", self.pushed, self.done, self.closed)
    }
}

impl Queue {
    /// The queue of stream `number` of `device`, `key` its process-unique number.
    pub(in crate::backend::host) fn new(device: DeviceId, name: String, number: u64, key: u64) -> Arc<Queue> {
        let track = Track::Stream { device, key, number };
        Arc::new(Queue { state: Mutex::default(), work: Condvar::new(), finished: Condvar::new(), device, name, track })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues `job` and returns its number.
    pub(in crate::backend::host) fn push(self: &Arc<Self>, job: Job) -> Result<u64> {
        self.push_named(job, None)
    }

    /// Queues `job`, op `name` (a slice of that name in a trace, with `args`: the inside
    /// of a JSON object), and returns its number.
    pub(in crate::backend::host) fn push_op(
        self: &Arc<Self>,
        job: Job,
        name: &'static str,
        args: String,
    ) -> Result<u64> {
        self.push_named(job, Some((name, args)))
    }

    /// Queues a wait for job `seq` of `other`: a `wait` slice in a trace, with a flow
    /// arrow from the end of that job.
    pub(in crate::backend::host) fn push_wait(self: &Arc<Self>, other: Arc<Queue>, seq: u64) -> Result<u64> {
        let to = self.track;
        self.push(Box::new(move || {
            let begin = Instant::now();
            let _ = other.wait_for(seq);
            if trace::is_on() {
                let end = Instant::now();
                trace::slice(to, "wait", "wait", begin, end, &format!(r#""for":{:?},"job":{seq}"#, other.name));
                if let Some(done) = other.end_of(seq) {
                    let inside = |t: Instant| t.checked_sub(Duration::from_nanos(1)).unwrap_or(t);
                    trace::flow("wait", other.track, inside(done), to, inside(end).max(begin));
                }
            }
        }))
    }

    /// When job `seq` (traced) finished, if this queue still remembers.
    fn end_of(&self, seq: u64) -> Option<Instant> {
        self.lock().recent.iter().rev().find(|(n, _)| *n <= seq).map(|(_, at)| *at)
    }

    fn push_named(self: &Arc<Self>, job: Job, name: Option<Named>) -> Result<u64> {
        let mut s = self.lock();
        if !s.worker {
            let queue = Arc::clone(self);
            std::thread::Builder::new()
                .name(format!("locus-{}", self.name))
                .spawn(move || queue.run())
                .map_err(|e| Error::Thread { message: format!("the worker of host {}: {e}", self.name) })?;
            s.worker = true;
        }
        s.jobs.push_back((job, name));
        s.pushed += 1;
        self.work.notify_one();
        Ok(s.pushed)
    }

    /// The number of the last job queued.
    pub(in crate::backend::host) fn pushed(&self) -> u64 {
        self.lock().pushed
    }

    /// A point after every job queued so far (an event's record): its number, and the
    /// stamp set when the worker gets there.
    pub(in crate::backend::host) fn mark(&self) -> (u64, Stamp) {
        let mut s = self.lock();
        let (seq, stamp) = (s.pushed, Stamp::default());
        if s.done >= seq {
            *stamp.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        } else {
            s.stamps.push((seq, Arc::clone(&stamp)));
        }
        (seq, stamp)
    }

    /// Whether job `seq` has finished.
    pub(in crate::backend::host) fn is_done(&self, seq: u64) -> bool {
        self.lock().done >= seq
    }

    /// Waits on the host until job `seq` has finished; an error when a job of this stream
    /// failed.
    pub(in crate::backend::host) fn wait_for(&self, seq: u64) -> Result<()> {
        let mut s = self.lock();
        while s.done < seq {
            s = self.finished.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        match &s.failed {
            None => Ok(()),
            Some(why) => Err(Error::Kernel { device: self.device, name: self.name.clone(), message: why.clone() }),
        }
    }

    /// No more jobs will come: the worker ends once the queue has drained.
    pub(in crate::backend::host) fn close(&self) {
        self.lock().closed = true;
        self.work.notify_all();
    }

    fn run(&self) {
        let mut s = self.lock();
        loop {
            let Some((job, name)) = s.jobs.pop_front() else {
                if s.closed {
                    s.worker = false;
                    return;
                }
                s = self.work.wait(s).unwrap_or_else(|p| p.into_inner());
                continue;
            };
            drop(s);
            delay();
            let begin = Instant::now();
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            let finished = Instant::now();
            let traced = name.filter(|_| trace::is_on());
            if let Some((name, args)) = &traced {
                trace::slice(self.track, name, "op", begin, finished, args);
            }
            s = self.lock();
            if let Err(e) = outcome {
                s.failed.get_or_insert(crate::error::panic_message(&*e));
            }
            s.done += 1;
            let done = s.done;
            if traced.is_some() {
                if s.recent.len() == RECENT {
                    s.recent.pop_front();
                }
                s.recent.push_back((done, finished));
            }
            if s.stamps.first().is_some_and(|(at, _)| *at <= done) {
                let now = Instant::now();
                s.stamps.retain(|(at, stamp)| {
                    let reached = *at <= done;
                    if reached {
                        *stamp.lock().unwrap_or_else(|p| p.into_inner()) = Some(now);
                    }
                    !reached
                });
            }
            self.finished.notify_all();
        }
    }
}

/// The delay before each job, from `LOCUS_HOST_STREAM_DELAY`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(in crate::backend::host) enum Delay {
    None,
    Fixed(Duration),
    /// Up to `max_us` microseconds, drawn from `seed`.
    Random {
        max_us: u64,
        seed: u64,
    },
}

static DELAY: OnceLock<Delay> = OnceLock::new();

/// The longest delay `LOCUS_HOST_STREAM_DELAY` may ask for, in microseconds: a second
/// before every stream op already slows a test suite to a crawl, a larger value would
/// make it hang (years, at `u64::MAX`), and `0-N:SEED` draws modulo `N + 1`, which
/// overflows at `N = u64::MAX`.
pub(in crate::backend::host) const MAX_DELAY_US: u64 = 1_000_000;

/// Reads `LOCUS_HOST_STREAM_DELAY`; the error says what is wrong with it.
pub(in crate::backend::host) fn configure() -> std::result::Result<(), String> {
    let d = match std::env::var("LOCUS_HOST_STREAM_DELAY") {
        Err(_) => Delay::None,
        Ok(v) => parse_delay(&v)?,
    };
    let _ = DELAY.set(d);
    Ok(())
}

pub(in crate::backend::host) fn parse_delay(v: &str) -> std::result::Result<Delay, String> {
    let v = v.trim();
    let bad = || {
        format!(
            "LOCUS_HOST_STREAM_DELAY=`{v}` is neither N (microseconds before each stream op, at most {MAX_DELAY_US}) \
             nor 0-N:SEED (a random delay up to N microseconds from SEED)"
        )
    };
    let us = |n: &str| n.trim().parse::<u64>().ok().filter(|&n| n <= MAX_DELAY_US).ok_or_else(bad);
    if v.is_empty() || v == "0" {
        return Ok(Delay::None);
    }
    if let Some(rest) = v.strip_prefix("0-") {
        let (max, seed) = rest.split_once(':').ok_or_else(bad)?;
        let max_us = us(max)?;
        let seed = seed.trim().parse().map_err(|_| bad())?;
        return Ok(Delay::Random { max_us, seed });
    }
    us(v).map(|us| Delay::Fixed(Duration::from_micros(us)))
}

fn delay() {
    static DRAWS: AtomicU64 = AtomicU64::new(0);
    match DELAY.get().copied().unwrap_or(Delay::None) {
        Delay::None => {}
        Delay::Fixed(d) => std::thread::sleep(d),
        Delay::Random { max_us, seed } => {
            let n = DRAWS.fetch_add(1, Ordering::Relaxed);
            let us = crate::backend::rand_bits(seed, n) % (max_us + 1);
            std::thread::sleep(Duration::from_micros(us));
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::host::queue::*;

    #[test]
    fn jobs_run_in_order_behind_the_host_and_waits_see_them_done() {
        let q = Queue::new(DeviceId::Cuda(0), "test".into(), 1, 0);
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let g = Arc::clone(&gate);
        q.push(Box::new(move || {
            let mut open = g.0.lock().unwrap();
            while !*open {
                open = g.1.wait(open).unwrap();
            }
        }))
        .unwrap();
        let mut last = 0;
        for i in 0..5 {
            let seen = Arc::clone(&seen);
            last = q.push(Box::new(move || seen.lock().unwrap().push(i))).unwrap();
        }
        // The host ran ahead: nothing after the gate has run.
        assert!(!q.is_done(last));
        assert!(seen.lock().unwrap().is_empty());
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
        q.wait_for(last).unwrap();
        assert_eq!(*seen.lock().unwrap(), vec![0, 1, 2, 3, 4]);
        q.close();
    }

    #[test]
    fn a_failed_job_is_a_sticky_error() {
        let q = Queue::new(DeviceId::Cuda(1), "failing".into(), 1, 0);
        let n = q.push(Box::new(|| panic!("boom"))).unwrap();
        let e = q.wait_for(n).unwrap_err().to_string();
        assert!(e.contains("boom") && e.contains("cuda:1"), "{e}");
        let m = q.push(Box::new(|| {})).unwrap();
        assert!(q.wait_for(m).is_err());
        q.close();
    }

    #[test]
    fn delays_parse_or_say_why_not() {
        assert_eq!(parse_delay("").unwrap(), Delay::None);
        assert_eq!(parse_delay("50").unwrap(), Delay::Fixed(Duration::from_micros(50)));
        assert_eq!(parse_delay("0-200:7").unwrap(), Delay::Random { max_us: 200, seed: 7 });
        assert!(parse_delay("fast").unwrap_err().contains("LOCUS_HOST_STREAM_DELAY=`fast`"));
        assert!(parse_delay("0-20").is_err());
    }

    #[test]
    fn delay_values_never_panic_and_stay_under_the_cap() {
        use crate::env_fuzz;
        let near = ["0", "50", "0-50:2026", "0-1000000:18446744073709551615", "1000000", "0-18446744073709551615:1"];
        let values = env_fuzz::values(0x4445_4c59, &near, env_fuzz::CASES);
        let n = env_fuzz::run("LOCUS_HOST_STREAM_DELAY", &values, |v| match parse_delay(v) {
            Ok(Delay::None) => assert!(["", "0"].contains(&v.trim()), "`{v}` gave no delay"),
            Ok(Delay::Fixed(d)) => assert!(d <= Duration::from_micros(MAX_DELAY_US), "`{v}` gave {d:?}"),
            Ok(Delay::Random { max_us, seed }) => {
                assert!(max_us <= MAX_DELAY_US, "`{v}` gave up to {max_us} us");
                // What `delay` draws, without the sleep: no overflow, no division by zero.
                let us = crate::backend::rand_bits(seed, 3) % (max_us + 1);
                assert!(us <= max_us);
            }
            Err(e) => env_fuzz::assert_clear(&e, "LOCUS_HOST_STREAM_DELAY", v, &["0-N:SEED", "at most 1000000"]),
        });
        assert!(n >= 4000, "{n} values");
        // Before the cap, `0-18446744073709551615:N` was accepted and its first draw
        // overflowed `max_us + 1` (without the cap this test fails on such a value even
        // when `near` does not hold one), and a delay of `18446744073709551615` µs hung
        // every stream.
        assert!(parse_delay("0-18446744073709551615:1").is_err());
        assert!(parse_delay("18446744073709551615").is_err());
        assert!(parse_delay("1000001").is_err());
        assert_eq!(parse_delay("1000000").unwrap(), Delay::Fixed(Duration::from_secs(1)));
    }
}
