//! Device times of traced work: while a trace is being written (`crate::trace`), each op
//! queued on a stream is bracketed by two timing events on that stream, and a collector
//! thread turns them, once complete, into a slice on the stream's track. A cross-stream
//! wait gets two timing events around it, which become a `wait` slice (how long the stream
//! stood still), and a flow arrow from the end of the last op timed on the recording
//! stream before the event was recorded. Work queued in a capture is not timed (a graph's
//! replay is, as one slice).
//!
//! Times are device times placed on the host's clock: per device and trace, an anchor
//! event is recorded on an idle stream and waited for, which pins its device time to an
//! `Instant`; every other event's time is the anchor's plus `cuEventElapsedTime` from it.
//! Because that elapsed time is an `f32` of milliseconds, a slice that starts more than a
//! second after its anchor becomes the new anchor, so placements stay within a microsecond.
//!
//! Off, an op pays one atomic load ([`crate::trace::is_on`]). A failure of the tracing
//! itself (no event could be made) drops that slice, never the op.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use crate::backend::api::fence::Fence;
use crate::backend::cuda::driver::event::CudaEvent;
use crate::backend::cuda::driver::stream::CudaStream;
use crate::device_id::DeviceId;
use crate::trace::{self, Track};

/// How long after its anchor an event may be before it anchors the later ones itself.
const REANCHOR_MS: f32 = 1000.0;

/// A device time pinned to the host clock.
struct Anchor {
    ordinal: u32,
    generation: u64,
    event: Arc<CudaEvent>,
    at: Instant,
}

/// Work whose events are queued and not yet all complete.
enum Pending {
    /// An op: `begin` and `end` bracket it on `track`.
    Op { begin: Arc<CudaEvent>, end: Arc<CudaEvent>, track: Track, name: Cow<'static, str>, args: String },
    /// A wait of `track` from `begin` to `end`, for work of `from` up to `mark` (the end
    /// of the last op timed there before the event was recorded).
    Wait { begin: Arc<CudaEvent>, end: Arc<CudaEvent>, track: Track, from: Track, mark: Arc<CudaEvent> },
}

impl Pending {
    fn last(&self) -> &CudaEvent {
        match self {
            Pending::Op { end, .. } | Pending::Wait { end, .. } => end,
        }
    }
}

static PENDING: Mutex<Vec<Pending>> = Mutex::new(Vec::new());
/// Work the collector took from `PENDING` whose events are not yet complete, in the order
/// queued (touched only under `WRITING`).
static BACKLOG: Mutex<VecDeque<Pending>> = Mutex::new(VecDeque::new());
static ANCHORS: Mutex<Vec<Anchor>> = Mutex::new(Vec::new());
/// Timing events no longer needed, by device ordinal, for the next spans. (Making 4096
/// a device up front, so that no traced op makes one, was measured on an H100: the cost
/// of a traced op did not move, 11.5 µs either way.)
static POOL: Mutex<Vec<Vec<CudaEvent>>> = Mutex::new(Vec::new());
static COLLECTOR: OnceLock<Option<Thread>> = OnceLock::new();
/// Whether the collector sleeps until woken (nothing was pending).
static SLEEPING: AtomicBool = AtomicBool::new(false);
/// Held while completed work is written, so that [`flush`] returns only once the
/// collector's batch is written too.
static WRITING: Mutex<()> = Mutex::new(());

fn lock<T>(m: &'static Mutex<T>) -> MutexGuard<'static, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The track of stream `s` (number 0: its device's default stream).
fn track(s: &CudaStream) -> Track {
    let number = if s.is_default() { 0 } else { s.id };
    Track::Stream { device: DeviceId::Cuda(s.ordinal), key: s.id, number }
}

/// A timing event recorded on `s` now.
fn mark(s: &CudaStream) -> Option<Arc<CudaEvent>> {
    let pooled = lock(&POOL).get_mut(s.ordinal as usize).and_then(Vec::pop);
    let ev = match pooled {
        Some(e) => e,
        None => CudaEvent::create(s.ordinal, s.ctx(), true).ok()?,
    };
    ev.record_mark(s).ok()?;
    Some(Arc::new(ev))
}

/// Whether work queued on `s` now is timed: a trace is on and `s` is not captured.
fn timed(s: &CudaStream) -> bool {
    trace::is_on() && s.capture().is_none()
}

/// For the first devices, one more than the trace generation each last anchored in: the
/// check of every traced op, with no lock (the collector holds `ANCHORS` often).
static ANCHORED: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];

/// Makes sure the device of `s` has an anchor in the current trace.
fn anchor(s: &CudaStream) -> Option<()> {
    let generation = trace::generation();
    let fast = ANCHORED.get(s.ordinal as usize);
    if fast.is_some_and(|g| g.load(Ordering::Acquire) == generation + 1) {
        return Some(());
    }
    let mut anchors = lock(&ANCHORS);
    if anchors.iter().any(|a| a.ordinal == s.ordinal && a.generation == generation) {
        return Some(());
    }
    // An idle stream of its own, so that the anchor is reached at once.
    let side = CudaStream::create(s.ordinal, s.ctx()).ok()?;
    let event = mark(&side)?;
    event.wait().ok()?;
    let at = Instant::now();
    anchors.retain(|a| a.ordinal != s.ordinal);
    anchors.push(Anchor { ordinal: s.ordinal, generation, event, at });
    if let Some(g) = fast {
        g.store(generation + 1, Ordering::Release);
    }
    Some(())
}

/// An op being timed on a stream (see [`begin`]): until it ends, no other thread queues
/// work on that stream, so its slice holds only its own op.
pub(in crate::backend::cuda) struct Span<'s> {
    begin: Arc<CudaEvent>,
    track: Track,
    _alone: MutexGuard<'s, ()>,
}

/// Starts timing what is queued next on `s`, if a trace is on.
#[inline]
pub(in crate::backend::cuda) fn begin(s: &CudaStream) -> Option<Span<'_>> {
    if !timed(s) {
        return None;
    }
    begin_traced(s)
}

/// [`begin`] with a trace on.
#[cold]
fn begin_traced(s: &CudaStream) -> Option<Span<'_>> {
    anchor(s)?;
    let alone = s.timed_op();
    Some(Span { begin: mark(s)?, track: track(s), _alone: alone })
}

impl Span<'_> {
    /// Ends the span after the op was queued on `s`: a slice `name` with `args` (the
    /// inside of a JSON object) once the device has run it.
    pub(in crate::backend::cuda) fn end(self, s: &CudaStream, name: impl Into<Cow<'static, str>>, args: String) {
        if let Some(end) = mark(s) {
            s.set_last_timed(Arc::clone(&end));
            push(Pending::Op { begin: self.begin, end, track: self.track, name: name.into(), args });
        }
    }
}

/// Ends `span` (from [`begin`] on `s`) if the op was queued (`queued` is `Ok`): a slice
/// `what()` gives the name and args of.
#[inline]
pub(in crate::backend::cuda) fn finish<R>(
    span: Option<Span<'_>>,
    s: &CudaStream,
    queued: &crate::error::Result<R>,
    what: impl FnOnce() -> (Cow<'static, str>, String),
) {
    if let (Some(span), Ok(_)) = (span, queued) {
        let (name, args) = what();
        span.end(s, name, args);
    }
}

/// The name and args of a copy slice: `kind` (`HtoD`, `DtoH`, `DtoD`, `peer`), its
/// bytes and the path it took (`pinned`, `direct`, `inline`, `staged`, `device`, `peer`).
pub(in crate::backend::cuda) fn copy(kind: &'static str, bytes: usize, path: &str) -> (Cow<'static, str>, String) {
    (format!("copy {kind}").into(), format!(r#""bytes":{bytes},"path":"{path}""#))
}

/// Where an event recorded on `s` now stands in the trace: `s`'s track and the end of the
/// last op timed on it (where the arrows of waits for the event start).
pub(in crate::backend::cuda) fn record_point(s: &CudaStream) -> Option<(Track, Arc<CudaEvent>)> {
    if timed(s) {
        Some((track(s), s.last_timed()?))
    } else {
        None
    }
}

/// Times a wait of `s` for an event recorded at `from` (see [`record_point`]); `wait`
/// queues it.
pub(in crate::backend::cuda) fn traced_wait(
    s: &CudaStream,
    from: Option<(Track, Arc<CudaEvent>)>,
    wait: impl FnOnce() -> crate::error::Result<()>,
) -> crate::error::Result<()> {
    let Some((from, mark_ev)) = from.filter(|_| timed(s)) else { return wait() };
    let Some(span) = begin(s) else { return wait() };
    wait()?;
    if let Some(end) = mark(s) {
        push(Pending::Wait { begin: span.begin, end, track: span.track, from, mark: mark_ev });
    }
    Ok(())
}

fn push(p: Pending) {
    lock(&PENDING).push(p);
    static HOOKED: std::sync::Once = std::sync::Once::new();
    HOOKED.call_once(|| trace::on_stop(flush));
    let collector = COLLECTOR.get_or_init(|| {
        std::thread::Builder::new().name("locus-trace-cuda".into()).spawn(collect).ok().map(|h| h.thread().clone())
    });
    // Woken only from its long sleep: while work is pending it looks every millisecond.
    if let (Some(t), true) = (collector, SLEEPING.swap(false, Ordering::AcqRel)) {
        t.unpark();
    }
}

/// The collector thread: writes what has completed, about every millisecond while
/// anything is pending, and sleeps when nothing is.
fn collect() {
    loop {
        if write_ready(false) > 0 {
            std::thread::park_timeout(Duration::from_millis(1));
            continue;
        }
        SLEEPING.store(true, Ordering::Release);
        // Work pushed between the count and the flag finds the flag set only after this
        // look, so it is not missed.
        if lock(&PENDING).is_empty() {
            std::thread::park();
        }
        SLEEPING.store(false, Ordering::Release);
    }
}

/// Waits for every pending event and writes them all (before a trace closes).
fn flush() {
    write_ready(true);
}

/// Writes the pending work whose events are complete (all of it, waiting, when `wait`);
/// returns how many are left.
fn write_ready(wait: bool) -> usize {
    let _writing = lock(&WRITING);
    let mut backlog = lock(&BACKLOG);
    // What was queued since the last look moves to the backlog at once (the list keeps
    // its capacity when nothing came meanwhile), so that an op being queued never waits
    // for the queries below, nor for work that is not yet complete to be moved back.
    let mut newer = std::mem::take(&mut *lock(&PENDING));
    backlog.extend(newer.drain(..));
    {
        let mut pending = lock(&PENDING);
        if pending.is_empty() && pending.capacity() < newer.capacity() {
            std::mem::swap(&mut *pending, &mut newer);
        }
    }
    // In the order queued, up to the first not complete: the rest waits for the next
    // look (work completes in stream order, mostly in queue order across streams).
    let mut spent = Vec::new();
    while let Some(p) = backlog.front() {
        if !wait && !p.last().is_done() {
            break;
        }
        let Some(p) = backlog.pop_front() else { break };
        if p.last().wait().is_ok() {
            write(p, &mut spent);
        }
    }
    recycle(spent);
    backlog.len() + lock(&PENDING).len()
}

/// The host time of `ev` (complete), by its device's anchor; re-anchors past a second.
fn at(ev: &Arc<CudaEvent>) -> Option<Instant> {
    let mut anchors = lock(&ANCHORS);
    let a = anchors.iter_mut().find(|a| a.ordinal == ev.ordinal)?;
    let ms = a.event.elapsed_ms(ev).ok()?;
    let when = if ms >= 0.0 {
        a.at.checked_add(Duration::from_secs_f64(ms as f64 / 1e3))?
    } else {
        a.at.checked_sub(Duration::from_secs_f64(-ms as f64 / 1e3))?
    };
    if ms > REANCHOR_MS {
        a.event = Arc::clone(ev);
        a.at = when;
    }
    Some(when)
}

/// Writes `p`'s slice (and arrow); its events go to `spent`, for [`recycle`].
fn write(p: Pending, spent: &mut Vec<Arc<CudaEvent>>) {
    match p {
        Pending::Op { begin, end, track, name, args } => {
            if let (Some(b), Some(e)) = (at(&begin), at(&end)) {
                trace::slice(track, &name, "gpu", b, e, &args);
            }
            spent.extend([begin, end]);
        }
        Pending::Wait { begin, end, track, from, mark } => {
            if let (Some(b), Some(e), Some(m)) = (at(&begin), at(&end), at(&mark)) {
                // Both ends of the arrow inside a slice: the op waited for, and the wait.
                let inside = |t: Instant| t.checked_sub(Duration::from_nanos(1)).unwrap_or(t);
                trace::slice(track, "wait", "wait", b, e, "");
                trace::flow("wait", from, inside(m), track, inside(e).max(b));
            }
            spent.extend([begin, end, mark]);
        }
    }
}

/// Puts the events no one else holds back in the pool (one lock for a look's worth).
fn recycle(events: Vec<Arc<CudaEvent>>) {
    if events.is_empty() {
        return;
    }
    let mut pool = lock(&POOL);
    for e in events {
        if let Ok(e) = Arc::try_unwrap(e) {
            let at = e.ordinal as usize;
            if pool.len() <= at {
                pool.resize_with(at + 1, Vec::new);
            }
            pool[at].push(e);
        }
    }
}
