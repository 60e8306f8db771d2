//! The host backend's simulated streams and events. A stream is an in-order queue with
//! its own worker ([`crate::backend::host::queue`]); an event marks a point of one stream's queue;
//! `wait_event` queues a wait on another stream's worker; synchronizes wait on the host.
//! Every step is booked with the hazard checker, and the ordering books count
//! cross-stream waits and skips exactly as the cuda backend does.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Instant;

use crate::backend::api::fence::Fence;
use crate::backend::host::buffer::HostBuffer;
use crate::backend::host::graph::{joins, HostCapture};
use crate::backend::host::queue::{Job, Queue, Stamp};
use crate::backend::sync::current_stream::{self as current, Current};
use crate::backend::sync::hazard::{self, Agent, Clock, Kind, Region};
use crate::backend::sync::ordering::{self, Mark, Order};
use crate::backend::sync::uses::{BookedStream, Wait};
use crate::device_id::DeviceId;
use crate::error::Result;
use crate::faults::{self, Point};

/// The ops of this backend that are copies (a fault at `copy`; every other op's is at `launch`).
const COPIES: [&str; 6] = ["upload", "download", "upload_async", "download_async", "copy_from", "copy"];

/// A simulated stream of one device.
#[derive(Debug)]
pub(crate) struct HostStream {
    pub(in crate::backend::host) device: DeviceId,
    /// Its number on the device (0: the default stream).
    pub(in crate::backend::host) id: u64,
    /// Process-unique, never reused: the key of its ordering books and clock.
    pub(in crate::backend::host) key: u64,
    pub(in crate::backend::host) order: Order,
    queue: Arc<Queue>,
    /// The capture this stream's work is recorded into now, if any.
    capture: Mutex<Option<Arc<HostCapture>>>,
}

static NEXT_STREAM: AtomicU64 = AtomicU64::new(1);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static ALL: Mutex<Vec<Weak<HostStream>>> = Mutex::new(Vec::new());

impl HostStream {
    fn create(device: DeviceId, id: u64) -> Arc<HostStream> {
        LIVE.fetch_add(1, Ordering::Relaxed);
        let name = if id == 0 { format!("{device}-default") } else { format!("{device}-stream{id}") };
        let key = ordering::new_stream_id();
        let s = Arc::new(HostStream {
            device,
            id,
            key,
            order: Order::default(),
            queue: Queue::new(device, name, id, key),
            capture: Mutex::new(None),
        });
        let mut all = ALL.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(&s));
        s
    }

    /// A new (non-default) stream of `device`.
    pub(in crate::backend::host) fn new_side(device: DeviceId) -> Arc<HostStream> {
        Self::create(device, NEXT_STREAM.fetch_add(1, Ordering::Relaxed))
    }

    /// The stream as the hazard checker names it.
    pub(in crate::backend::host) fn agent(&self) -> Agent {
        Agent::Stream { key: self.key, device: self.device, id: self.id }
    }

    /// The capture this stream's work goes into now, if any.
    pub(crate) fn capture(&self) -> Option<Arc<HostCapture>> {
        self.capture.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records this stream's work into `c` from now on (`None`: queue it again).
    pub(in crate::backend::host) fn set_capture(&self, c: Option<Arc<HostCapture>>) {
        *self.capture.lock().unwrap_or_else(|p| p.into_inner()) = c;
    }

    /// Whether a launch's uses are wanted: by the hazard checker (debug builds), or by a
    /// trace, whose op slices say how many bytes each op reads and writes (release too).
    pub(in crate::backend::host) fn uses_wanted() -> bool {
        hazard::enabled() || crate::trace::is_on()
    }

    /// Queues `job`, which makes `uses`, as op `op`; returns the job's number and the
    /// stream's clock after it (empty when the checker is off). While the stream is
    /// captured the job is recorded instead (number 0, nothing booked: the replay is).
    pub(in crate::backend::host) fn launch(
        &self,
        op: &'static str,
        uses: &[(Region<'_>, Kind)],
        job: Job,
    ) -> Result<(u64, Clock)> {
        // What can fail when work is queued on a GPU (the launch, or a copy's DMA), in a
        // capture too.
        let point = if COPIES.contains(&op) { Point::Copy } else { Point::Launch };
        faults::check(point, self.device, op)?;
        if let Some(c) = self.capture() {
            c.record(job);
            return Ok((0, Clock::default()));
        }
        // In a trace, the op's slice says how many bytes it reads and writes.
        let args = if crate::trace::is_on() {
            let sum = |k: Kind| uses.iter().filter(|(_, u)| *u == k).map(|(r, _)| r.bytes).sum::<usize>();
            format!(r#""bytes_read":{},"bytes_written":{}"#, sum(Kind::Read), sum(Kind::Write))
        } else {
            String::new()
        };
        let seq = self.queue.push_op(job, op, args)?;
        let clock = if hazard::enabled() { hazard::stream_op(self.agent(), seq, op, uses) } else { Clock::default() };
        Ok((seq, clock))
    }

    /// Waits on the host for everything queued so far.
    pub(in crate::backend::host) fn synchronize(&self) -> Result<()> {
        let seq = self.queue.pushed();
        let (clock, _) = if hazard::enabled() { hazard::stream_clock(self.agent()) } else { Default::default() };
        self.queue.wait_for(seq)?;
        hazard::host_waits(&clock);
        Ok(())
    }

    /// Waits on the host for job `seq`, after which the host has seen `clock`.
    pub(in crate::backend::host) fn wait_job(&self, seq: u64, clock: &Clock) -> Result<()> {
        self.queue.wait_for(seq)?;
        hazard::host_waits(clock);
        Ok(())
    }

    /// Makes this stream wait (on its worker) for everything queued on `other` so far.
    /// Waiting for a captured stream joins its capture; inside a capture the recorded
    /// order already keeps every wait.
    fn wait_stream(self: &Arc<Self>, other: &HostStream) -> Result<()> {
        if std::ptr::eq(&**self, other) {
            return Ok(());
        }
        joins(self, other.capture().map(|c| Arc::downgrade(&c)))?;
        if self.capture().is_some() {
            return Ok(());
        }
        let (q, seq) = (Arc::clone(&other.queue), other.queue.pushed());
        let (clock, _) = if hazard::enabled() { hazard::stream_clock(other.agent()) } else { Default::default() };
        self.queue.push_wait(q, seq)?;
        hazard::stream_waits(self.agent(), &clock);
        Ok(())
    }
}

impl Drop for HostStream {
    fn drop(&mut self) {
        self.queue.close();
        LIVE.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Simulated streams alive now: the devices' default streams (made on first use, as the
/// cuda backend makes a device's own stream when it opens it) and the user's.
pub(in crate::backend::host) fn live_streams() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Every live stream of `device`.
pub(in crate::backend::host) fn streams_of(device: DeviceId) -> Vec<Arc<HostStream>> {
    let all = ALL.lock().unwrap_or_else(|p| p.into_inner());
    all.iter().filter_map(Weak::upgrade).filter(|s| s.device == device).collect()
}

/// The default stream of `device`, made on first use and kept for the process.
pub(in crate::backend::host) fn default_stream(device: DeviceId) -> Arc<HostStream> {
    static DEFAULTS: LazyLock<Mutex<HashMap<DeviceId, Arc<HostStream>>>> = LazyLock::new(Default::default);
    let mut d = DEFAULTS.lock().unwrap_or_else(|p| p.into_inner());
    Arc::clone(d.entry(device).or_insert_with(|| HostStream::create(device, 0)))
}

thread_local! {
    /// The simulated streams `on_stream` made current on this thread.
    static CURRENT: Current<Arc<HostStream>> = const { Current::new() };
}

/// The stream `on_stream` made current for `device` on this thread, if any.
pub(crate) fn current_of(device: DeviceId) -> Option<Arc<HostStream>> {
    CURRENT.with(|c| c.of(device))
}

/// Runs `f` with `stream` current for `device` on this thread.
pub(crate) fn with_current<R>(device: DeviceId, stream: Arc<HostStream>, f: impl FnOnce() -> R) -> R {
    current::with_current(&CURRENT, device, stream, f)
}

/// The stream ops on `device` queue on for this thread now.
pub(in crate::backend::host) fn current_stream(device: DeviceId) -> Arc<HostStream> {
    current_of(device).unwrap_or_else(|| default_stream(device))
}

/// Prepares `h` to be used on stream `on` as the cuda backend does: none on the writer's
/// stream, none when `on` already waited for `h` or for a later write of the writer
/// (counted as skipped), else `on` waits for the writer (counted as a wait); `on` joins
/// the users, whose use the free of `h` waits for. While `on` is captured, an input of
/// the graph is ordered at each replay instead, and memory neither made in the capture
/// nor an input is an error.
pub(in crate::backend::host) fn use_on_stream(h: &HostBuffer, on: &Arc<HostStream>) -> Result<()> {
    if h.len() == 0 || h.home.is_none() {
        return Ok(());
    }
    if let Some(c) = on.capture() {
        if !c.may_read(h)? {
            return Ok(());
        }
    }
    h.uses.read_on(h.home.as_ref(), on, |w| wait_for(on, w))
}

/// `on` waits for what the books say (`sync/uses.rs`): on the host a stream's queue up to
/// now, after which `on` is ordered after that stream's write `upto`.
fn wait_for(on: &Arc<HostStream>, w: Wait<'_, HostStream, HostEvent>) -> Result<()> {
    faults::check(Point::Wait, on.device, "wait_event")?;
    match w {
        Wait::Stream { stream, upto } => {
            on.wait_stream(stream)?;
            on.order.note_wait(stream.key, upto);
            Ok(())
        }
        Wait::Event(e) => e.wait_on(on),
    }
}

impl BookedStream for HostStream {
    fn stream_id(&self) -> u64 {
        self.key
    }

    fn order(&self) -> &Order {
        &self.order
    }
}

/// Prepares `h` to be written in place on `on`: `on` waits for the last write and for
/// every stream that read it since.
pub(in crate::backend::host) fn before_write(h: &HostBuffer, on: &Arc<HostStream>) -> Result<()> {
    if h.len() == 0 || h.home.is_none() {
        return Ok(());
    }
    h.uses().write_on(on, |w| wait_for(on, w))
}

/// `h` was just written in place by work queued on `on`.
pub(in crate::backend::host) fn after_write(h: &HostBuffer, on: &Arc<HostStream>) {
    if h.home.is_none() {
        return;
    }
    h.uses().wrote(h.home.as_ref(), on, None);
}

/// Forgets the writes a capture recorded: the memory counts as written on its home
/// stream, where nothing is pending, until a replay writes it.
pub(in crate::backend::host) fn forget_captured_writes(h: &HostBuffer) {
    h.uses().forget_writes(h.home.clone());
}

/// Where an event was recorded, and what waiting for it means.
#[derive(Debug)]
struct Recorded {
    /// The stream's queue (not the stream: an event does not keep its stream alive).
    queue: Arc<Queue>,
    seq: u64,
    clock: Clock,
    /// Set when the stream reaches the event.
    at: Stamp,
    /// The capture the record was part of: then the event marks a point of a graph.
    capture: Option<Weak<HostCapture>>,
}

/// An event of the host backend: a point in one stream's queue.
#[derive(Debug, Default)]
pub(crate) struct HostEvent {
    rec: Mutex<Option<Recorded>>,
    pub(in crate::backend::host) mark: Mark,
}

impl Fence for HostEvent {
    fn is_done(&self) -> bool {
        self.outside_captures().is_ok() && HostEvent::is_done(self)
    }

    fn wait(&self) -> Result<()> {
        self.outside_captures()?;
        self.synchronize()
    }
}

impl HostEvent {
    fn recorded(&self) -> Option<(Arc<Queue>, u64, Clock, Stamp)> {
        let r = self.rec.lock().unwrap_or_else(|p| p.into_inner());
        r.as_ref().map(|r| (Arc::clone(&r.queue), r.seq, r.clock.clone(), Arc::clone(&r.at)))
    }

    /// Records the event at the current end of `stream`.
    pub(in crate::backend::host) fn record(&self, stream: &Arc<HostStream>) -> Result<()> {
        faults::check(Point::Record, stream.device, "record_event")?;
        let writes = stream.order.writes();
        let (clock, _) = if hazard::enabled() { hazard::stream_clock(stream.agent()) } else { Default::default() };
        let (seq, at) = stream.queue.mark();
        *self.rec.lock().unwrap_or_else(|p| p.into_inner()) = Some(Recorded {
            queue: Arc::clone(&stream.queue),
            seq,
            clock,
            at,
            capture: stream.capture().map(|c| Arc::downgrade(&c)),
        });
        self.mark.set(stream.key, writes);
        Ok(())
    }

    /// The capture the event was recorded in, if it was.
    fn capture(&self) -> Option<Weak<HostCapture>> {
        self.rec.lock().unwrap_or_else(|p| p.into_inner()).as_ref().and_then(|r| r.capture.clone())
    }

    /// An error when the event was recorded in a capture: it marks a point of a graph,
    /// which nothing outside the capture can wait for.
    pub(in crate::backend::host) fn outside_captures(&self) -> Result<()> {
        match self.capture() {
            Some(_) => Err(crate::backend::sync::capture::event_of_ended_capture()),
            None => Ok(()),
        }
    }

    /// Makes `stream` wait for the event (nothing when it was never recorded). Waiting
    /// for an event of a capture joins it.
    pub(in crate::backend::host) fn wait_on(&self, stream: &Arc<HostStream>) -> Result<()> {
        let Some((q, seq, clock, _)) = self.recorded() else { return Ok(()) };
        joins(stream, self.capture())?;
        if stream.capture().is_some() {
            if let Some((writer, upto)) = self.mark.get() {
                stream.order.note_wait(writer, upto);
            }
            return Ok(());
        }
        if !Arc::ptr_eq(&q, &stream.queue) {
            stream.queue.push_wait(q, seq)?;
        }
        hazard::stream_waits(stream.agent(), &clock);
        if let Some((writer, upto)) = self.mark.get() {
            stream.order.note_wait(writer, upto);
        }
        Ok(())
    }

    /// Waits on the host for the event.
    pub(in crate::backend::host) fn synchronize(&self) -> Result<()> {
        match self.recorded() {
            Some((q, seq, clock, _)) => {
                q.wait_for(seq)?;
                hazard::host_waits(&clock);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Whether the stream has reached the event (an unrecorded event is complete).
    pub(in crate::backend::host) fn is_done(&self) -> bool {
        match self.recorded() {
            Some((q, seq, clock, _)) => {
                let done = q.is_done(seq);
                if done {
                    hazard::host_waits(&clock);
                }
                done
            }
            None => true,
        }
    }

    /// When the stream reached the event, once it has.
    pub(in crate::backend::host) fn time(&self) -> Result<Instant> {
        let not_yet = crate::backend::events_not_complete;
        let (_, _, _, at) = self.recorded().ok_or_else(not_yet)?;
        let t = *at.lock().unwrap_or_else(|p| p.into_inner());
        t.ok_or_else(not_yet)
    }
}
