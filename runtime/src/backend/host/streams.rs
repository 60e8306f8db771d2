//! The host backend's simulated streams and events. A stream is an in-order queue with
//! its own worker ([`super::queue`]); an event marks a point of one stream's queue;
//! `wait_event` queues a wait on another stream's worker; synchronizes wait on the host.
//! Every step is booked with the hazard checker, and the ordering books count
//! cross-stream waits and skips exactly as the cuda backend does.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Instant;

use super::buffer::HostBuffer;
use super::queue::{Job, Queue, Stamp};
use crate::backend::hazard::{self, Agent, Clock, Kind, Region};
use crate::backend::ordering::{self, Mark, Order};
use crate::backend::{count_cross_stream_wait, foreign, Buffer, RawEvent, RawStream};
use crate::device_id::DeviceId;
use crate::error::Result;

/// A simulated stream of one device.
#[derive(Debug)]
pub(crate) struct HostStream {
    pub(super) device: DeviceId,
    /// Its number on the device (0: the default stream).
    pub(super) id: u64,
    /// Process-unique, never reused: the key of its ordering books and clock.
    pub(super) key: u64,
    pub(super) order: Order,
    queue: Arc<Queue>,
}

static NEXT_STREAM: AtomicU64 = AtomicU64::new(1);
static LIVE: AtomicUsize = AtomicUsize::new(0);
static ALL: Mutex<Vec<Weak<HostStream>>> = Mutex::new(Vec::new());

impl HostStream {
    fn create(device: DeviceId, id: u64) -> Arc<HostStream> {
        LIVE.fetch_add(1, Ordering::Relaxed);
        let name = if id == 0 { format!("{device}-default") } else { format!("{device}-stream{id}") };
        let s = Arc::new(HostStream {
            device,
            id,
            key: ordering::new_stream_id(),
            order: Order::default(),
            queue: Queue::new(device, name),
        });
        let mut all = ALL.lock().unwrap_or_else(|p| p.into_inner());
        all.retain(|w| w.strong_count() > 0);
        all.push(Arc::downgrade(&s));
        s
    }

    /// A new (non-default) stream of `device`.
    pub(super) fn new_side(device: DeviceId) -> Arc<HostStream> {
        Self::create(device, NEXT_STREAM.fetch_add(1, Ordering::Relaxed))
    }

    /// The stream as the hazard checker names it.
    pub(super) fn agent(&self) -> Agent {
        Agent::Stream { key: self.key, device: self.device, id: self.id }
    }

    /// Queues `job`, which makes `uses`, as op `op`; returns the job's number and the
    /// stream's clock after it (empty when the checker is off).
    pub(super) fn launch(&self, op: &'static str, uses: &[(Region<'_>, Kind)], job: Job) -> Result<(u64, Clock)> {
        let seq = self.queue.push(job)?;
        let clock = if hazard::enabled() { hazard::stream_op(self.agent(), seq, op, uses) } else { Clock::default() };
        Ok((seq, clock))
    }

    /// Waits on the host for everything queued so far.
    pub(super) fn synchronize(&self) -> Result<()> {
        let seq = self.queue.pushed();
        let (clock, _) = if hazard::enabled() { hazard::stream_clock(self.agent()) } else { Default::default() };
        self.queue.wait_for(seq)?;
        hazard::host_waits(&clock);
        Ok(())
    }

    /// Waits on the host for job `seq`, after which the host has seen `clock`.
    pub(super) fn wait_job(&self, seq: u64, clock: &Clock) -> Result<()> {
        self.queue.wait_for(seq)?;
        hazard::host_waits(clock);
        Ok(())
    }

    /// Makes this stream wait (on its worker) for everything queued on `other` so far.
    fn wait_stream(&self, other: &HostStream) -> Result<()> {
        if std::ptr::eq(self, other) {
            return Ok(());
        }
        let (q, seq) = (Arc::clone(&other.queue), other.queue.pushed());
        let (clock, _) = if hazard::enabled() { hazard::stream_clock(other.agent()) } else { Default::default() };
        self.queue.push(Box::new(move || {
            let _ = q.wait_for(seq);
        }))?;
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
pub(super) fn live_streams() -> usize {
    LIVE.load(Ordering::Relaxed)
}

/// Every live stream of `device`.
pub(super) fn streams_of(device: DeviceId) -> Vec<Arc<HostStream>> {
    let all = ALL.lock().unwrap_or_else(|p| p.into_inner());
    all.iter().filter_map(Weak::upgrade).filter(|s| s.device == device).collect()
}

/// The default stream of `device`, made on first use and kept for the process.
pub(super) fn default_stream(device: DeviceId) -> Arc<HostStream> {
    static DEFAULTS: LazyLock<Mutex<HashMap<DeviceId, Arc<HostStream>>>> = LazyLock::new(Default::default);
    let mut d = DEFAULTS.lock().unwrap_or_else(|p| p.into_inner());
    Arc::clone(d.entry(device).or_insert_with(|| HostStream::create(device, 0)))
}

/// The stream ops on `device` queue on for this thread now.
pub(super) fn current_stream(device: DeviceId) -> Arc<HostStream> {
    match crate::backend::current_stream::current(device) {
        Some(RawStream::Host(s)) => s,
        _ => default_stream(device),
    }
}

/// Prepares `h` to be used on stream `on` as the cuda backend does: none on the writer's
/// stream, none when `on` already waited for `h` or for a later write of the writer
/// (counted as skipped), else `on` waits for the writer (counted as a wait); `on` joins
/// the readers, whose use the free of `h` waits for.
pub(super) fn use_on_stream(h: &HostBuffer, on: &Arc<HostStream>) -> Result<()> {
    let Some(writer) = &h.stream else { return Ok(()) };
    if Arc::ptr_eq(writer, on) || h.len() == 0 {
        return Ok(());
    }
    let mut readers = h.readers.lock().unwrap_or_else(|p| p.into_inner());
    if readers.iter().any(|r| Arc::ptr_eq(r, on)) {
        ordering::count_skipped();
        return Ok(());
    }
    if on.order.has_waited(writer.key, h.written) {
        ordering::count_skipped();
    } else {
        on.wait_stream(writer)?;
        on.order.note_wait(writer.key, h.written);
        count_cross_stream_wait();
    }
    readers.push(Arc::clone(on));
    Ok(())
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
}

/// An event of the host backend: a point in one stream's queue.
#[derive(Debug, Default)]
pub(crate) struct HostEvent {
    rec: Mutex<Option<Recorded>>,
    pub(super) mark: Mark,
}

impl HostEvent {
    fn recorded(&self) -> Option<(Arc<Queue>, u64, Clock, Stamp)> {
        let r = self.rec.lock().unwrap_or_else(|p| p.into_inner());
        r.as_ref().map(|r| (Arc::clone(&r.queue), r.seq, r.clock.clone(), Arc::clone(&r.at)))
    }

    /// Records the event at the current end of `stream`.
    pub(super) fn record(&self, stream: &Arc<HostStream>) -> Result<()> {
        let writes = stream.order.writes();
        let (clock, _) = if hazard::enabled() { hazard::stream_clock(stream.agent()) } else { Default::default() };
        let (seq, at) = stream.queue.mark();
        *self.rec.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(Recorded { queue: Arc::clone(&stream.queue), seq, clock, at });
        self.mark.set(stream.key, writes);
        Ok(())
    }

    /// Makes `stream` wait for the event (nothing when it was never recorded).
    pub(super) fn wait_on(&self, stream: &Arc<HostStream>) -> Result<()> {
        let Some((q, seq, clock, _)) = self.recorded() else { return Ok(()) };
        if !Arc::ptr_eq(&q, &stream.queue) {
            stream.queue.push(Box::new(move || {
                let _ = q.wait_for(seq);
            }))?;
        }
        hazard::stream_waits(stream.agent(), &clock);
        if let Some((writer, upto)) = self.mark.get() {
            stream.order.note_wait(writer, upto);
        }
        Ok(())
    }

    /// Waits on the host for the event.
    pub(super) fn synchronize(&self) -> Result<()> {
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
    pub(super) fn is_done(&self) -> bool {
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
    pub(super) fn time(&self) -> Result<Instant> {
        let not_yet = crate::backend::events_not_complete;
        let (_, _, _, at) = self.recorded().ok_or_else(not_yet)?;
        let t = *at.lock().unwrap_or_else(|p| p.into_inner());
        t.ok_or_else(not_yet)
    }
}

/// The host memory of `b`; device memory here is a caller's bug, reported, not a panic.
pub(super) fn host_mem(b: &Buffer) -> Result<&HostBuffer> {
    match b {
        Buffer::Host(h) => Ok(h),
        Buffer::Cuda(_) => Err(foreign("host", "memory")),
    }
}

/// The simulated stream `s`; a cuda stream here is a caller's bug.
pub(super) fn host_stream(s: &RawStream) -> Result<&Arc<HostStream>> {
    match s {
        RawStream::Host(s) => Ok(s),
        RawStream::Cuda(_) => Err(foreign("host", "a stream")),
    }
}

pub(super) fn host_event(e: &RawEvent) -> Result<&HostEvent> {
    match e {
        RawEvent::Host(e) => Ok(e),
        RawEvent::Cuda(_) => Err(foreign("host", "an event")),
    }
}
