//! What a graph capture may record, decided in one place before anything reaches a
//! backend.
//!
//! While a thread captures (`Graph::capture` runs its closure inside [`enter`]), every
//! device-level call goes through [`Gate`] ([`crate::backend::for_device`] hands it out) and every
//! storage-level op of a [`crate::backend::Buffer`] asks [`on_device`] first. Work on the capture's
//! device queues on the capturing stream and is recorded; everything else is an
//! [`Error::NotCapturable`] naming the op: host reads and synchronizes (nothing runs
//! during a capture, so there is nothing to wait for), copies to or from host memory (a
//! replay would copy the same host bytes again), ops on another device, collectives, and
//! integer division (it reads back whether a divisor was zero).
//!
//! The backends add what only they can see: a captured op may read memory made in the
//! capture or the graph's inputs only (`begin_capture`), and a stream that waits for an
//! event recorded in the capture joins it.

use std::cell::Cell;
use std::sync::{Arc, Weak};
use std::time::Duration;

use crate::backend::api::user_kernel::{Grid, KernelArg, KernelSource};
use crate::backend::{selected, AnyEvent, AnyStream, BackendDevice, Buffer, Collective, HostBuffer, Release};
use crate::device_id::DeviceId;
use crate::element::{DType, Scalar};
use crate::error::{Error, Result};

thread_local! {
    /// The device this thread is capturing work of, if any.
    static ACTIVE: Cell<Option<DeviceId>> = const { Cell::new(None) };
}

/// While alive, the thread captures work of a device; restores the previous state on
/// drop. A forgotten guard leaves the thread capturing, which refuses more, never less.
pub(crate) struct Capturing {
    prev: Option<DeviceId>,
}

/// Marks this thread as capturing work of `device`.
pub(crate) fn enter(device: DeviceId) -> Capturing {
    Capturing { prev: ACTIVE.with(|a| a.replace(Some(device))) }
}

impl Drop for Capturing {
    fn drop(&mut self) {
        ACTIVE.with(|a| a.set(self.prev));
    }
}

/// The device this thread captures work of, if it does.
pub(crate) fn active() -> Option<DeviceId> {
    ACTIVE.with(Cell::get)
}

/// `op` cannot be captured, for `reason`: an error while this thread captures.
pub(crate) fn refuse(op: &'static str, reason: &str) -> Result<()> {
    match active() {
        Some(_) => Err(Error::NotCapturable { op, reason: reason.into() }),
        None => Ok(()),
    }
}

/// `op` on `device` may be captured: only work of the capture's device can be.
pub(crate) fn on_device(op: &'static str, device: DeviceId) -> Result<()> {
    match active() {
        Some(graph) if graph != device => Err(Error::NotCapturable {
            op,
            reason: format!(
                "it runs on {device}, and this graph captures work on {graph} only; \
                 capture the work of each device in a graph of its own"
            ),
        }),
        _ => Ok(()),
    }
}

/// Integer division reads back whether a divisor was zero: a host wait.
pub(crate) fn division(op: crate::backend::BinaryOp, dtype: DType) -> Result<()> {
    if op == crate::backend::BinaryOp::Div && !dtype.is_float() {
        return refuse(
            "integer division",
            "it reads back whether a divisor was zero, which waits on the host; divide floats in the graph, or divide integers outside it",
        );
    }
    Ok(())
}

/// The rule of both backends for a stream that waits for work of a capture (an event
/// recorded in it, or a stream in it): `theirs` is that capture (`None`: the work is not
/// captured), `mine` the capture the waiting stream is in. The capture the stream must
/// join, if any: waiting for an ended capture, or from another one, is an error.
pub(crate) fn joining<C>(
    theirs: Option<Weak<C>>,
    mine: Option<Arc<C>>,
    ended: impl Fn(&C) -> bool,
) -> Result<Option<Arc<C>>> {
    let Some(theirs) = theirs else { return Ok(None) };
    let theirs = match theirs.upgrade() {
        Some(c) if !ended(&c) => c,
        _ => return Err(event_of_ended_capture()),
    };
    match mine {
        Some(mine) if Arc::ptr_eq(&mine, &theirs) => Ok(None),
        Some(_) => Err(Error::NotCapturable {
            op: "wait_event",
            reason: "the stream is captured into another graph; one capture cannot wait for another".into(),
        }),
        None => Ok(Some(theirs)),
    }
}

/// A captured op read memory that is neither an input nor made in the capture.
pub(crate) fn not_an_input() -> Error {
    Error::NotCapturable {
        op: "reading a tensor",
        reason: "the tensor is neither an input of the graph nor made in the capture, and a replay could outlive it; \
                 pass it in the graph's inputs"
            .into(),
    }
}

/// An event recorded in a capture, used outside it.
pub(crate) fn event_of_ended_capture() -> Error {
    Error::InvalidArgument {
        op: "event",
        reason: "the event was recorded during a graph capture: it marks a point of the graph, not of a stream, \
                 and nothing outside the capture can wait for it; record an event after `replay()` instead"
            .into(),
    }
}

/// A stream forked in a capture was not joined back before it ended.
pub(crate) fn unjoined() -> Error {
    Error::InvalidArgument {
        op: "Graph::capture",
        reason: "a stream that joined the capture (it waited for one of its events) has work the capturing stream \
                 never waited for; record an event on it and make the capturing stream wait for it before the \
                 capture ends"
            .into(),
    }
}

const SYNC: &str =
    "nothing runs while a graph is captured, so there is nothing to wait for; synchronize after `replay()`";
const HOST_COPY: &str = "a replay would copy the same host bytes again; write new data into an input between replays \
     (`Graph::inputs_mut`), and read outputs after a replay";

/// The device-level calls of a capturing thread (see the module doc).
pub(crate) struct Gate;

/// The one gate.
pub(crate) static GATE: Gate = Gate;

impl Gate {
    /// The backend of `device`, which must be the capture's device.
    fn of(op: &'static str, device: DeviceId) -> Result<&'static dyn BackendDevice> {
        on_device(op, device)?;
        crate::backend::for_device_now(device)
    }
}

impl BackendDevice for Gate {
    fn name(&self) -> &'static str {
        selected().map(|b| b.name()).unwrap_or("host")
    }

    fn device_count(&self) -> usize {
        selected().map(|b| b.device_count()).unwrap_or(0)
    }

    fn make_current(&self, device: DeviceId) -> Result<()> {
        crate::backend::for_device_now(device)?.make_current(device)
    }

    fn memory(&self, device: DeviceId) -> Result<(usize, usize)> {
        crate::backend::for_device_now(device)?.memory(device)
    }

    fn reset_peak(&self, device: DeviceId) -> Result<()> {
        crate::backend::for_device_now(device)?.reset_peak(device)
    }

    fn cached_bytes(&self, device: DeviceId) -> Result<usize> {
        crate::backend::for_device_now(device)?.cached_bytes(device)
    }

    fn live_streams(&self) -> usize {
        selected().map(|b| b.live_streams()).unwrap_or(0)
    }

    fn default_stream(&self, device: DeviceId) -> Result<AnyStream> {
        crate::backend::for_device_now(device)?.default_stream(device)
    }

    fn new_stream(&self, device: DeviceId) -> Result<AnyStream> {
        crate::backend::for_device_now(device)?.new_stream(device)
    }

    fn sync_stream(&self, _: &AnyStream) -> Result<()> {
        Err(Error::NotCapturable { op: "Stream::synchronize", reason: SYNC.into() })
    }

    fn sync_device(&self, _: DeviceId) -> Result<()> {
        Err(Error::NotCapturable { op: "synchronize", reason: SYNC.into() })
    }

    fn new_event(&self, device: DeviceId, timing: bool) -> Result<AnyEvent> {
        crate::backend::for_device_now(device)?.new_event(device, timing)
    }

    fn record_event(&self, event: &AnyEvent, stream: &AnyStream) -> Result<()> {
        selected()?.record_event(event, stream)
    }

    fn wait_event(&self, stream: &AnyStream, event: &AnyEvent) -> Result<()> {
        selected()?.wait_event(stream, event)
    }

    fn sync_event(&self, _: &AnyEvent) -> Result<()> {
        Err(Error::NotCapturable { op: "Event::synchronize", reason: SYNC.into() })
    }

    fn event_done(&self, _: &AnyEvent) -> Result<bool> {
        Err(Error::NotCapturable { op: "Event::is_complete", reason: SYNC.into() })
    }

    fn elapsed_ms(&self, _: &AnyEvent, _: &AnyEvent) -> Result<f32> {
        Err(Error::NotCapturable {
            op: "Event::elapsed",
            reason: "a captured event has no time until a replay runs; time replays from outside the graph".into(),
        })
    }

    fn alloc_pinned(&self, _: usize) -> Result<usize> {
        Err(Error::NotCapturable { op: "pinned memory", reason: HOST_COPY.into() })
    }

    unsafe fn free_pinned(&self, ptr: usize, bytes: usize) {
        if let Ok(b) = crate::backend::for_device_now(DeviceId::Pinned) {
            // SAFETY: the caller's contract, passed on unchanged.
            unsafe { b.free_pinned(ptr, bytes) }
        }
    }

    fn upload(&self, _: DeviceId, _: &[u8]) -> Result<Buffer> {
        Err(Error::NotCapturable { op: "a copy from host memory", reason: HOST_COPY.into() })
    }

    unsafe fn wrap(&self, _: DeviceId, _: u64, _: usize, _: &AnyStream, release: Release) -> Result<Buffer> {
        // `Tensor::from_raw_parts` refuses before it gets here, while its caller still
        // owns the memory; should anything else get here, the end of the owner's work
        // cannot be known during a capture, so the memory is never given back.
        release.leak();
        Err(Error::NotCapturable {
            op: "from_raw_parts",
            reason: "memory made outside locus cannot join a graph while it is captured; wrap it before the capture"
                .into(),
        })
    }

    fn upload_async(&self, _: DeviceId, _: &HostBuffer, _: &AnyStream) -> Result<(Buffer, AnyEvent)> {
        Err(Error::NotCapturable { op: "to_async", reason: HOST_COPY.into() })
    }

    fn copy(&self, src: &Buffer, device: DeviceId) -> Result<Buffer> {
        use crate::backend::BackendStorage;
        let from = src.device_id();
        if device.is_host() || from.is_host() {
            return Err(Error::NotCapturable { op: "a copy between host and device", reason: HOST_COPY.into() });
        }
        Gate::of("a copy between devices", from)?;
        Gate::of("a copy between devices", device)?.copy(src, device)
    }

    fn fill(&self, device: DeviceId, dtype: DType, len: usize, value: Scalar) -> Result<Buffer> {
        Gate::of("full", device)?.fill(device, dtype, len, value)
    }

    fn arange(&self, device: DeviceId, dtype: DType, len: usize, start: f64, step: f64) -> Result<Buffer> {
        Gate::of("arange", device)?.arange(device, dtype, len, start, step)
    }

    fn rand(&self, device: DeviceId, dtype: DType, len: usize, seed: u64) -> Result<Buffer> {
        Gate::of("rand", device)?.rand(device, dtype, len, seed)
    }

    fn can_access_peer(&self, device: DeviceId, peer: DeviceId) -> Result<bool> {
        crate::backend::for_device_now(device)?.can_access_peer(device, peer)
    }

    fn enable_peer_access(&self, _: DeviceId, _: DeviceId) -> Result<()> {
        Err(Error::NotCapturable {
            op: "enable_peer_access",
            reason: "it changes the devices, not a stream; enable peer access before the capture".into(),
        })
    }

    fn collective(&self, _: &[DeviceId], _: DType, _: usize, _: Collective<'_>) -> Result<Option<Vec<Buffer>>> {
        Err(Error::NotCapturable {
            op: "a collective (NCCL)",
            reason: "a graph captures the work of one device; run collectives between replays".into(),
        })
    }

    fn has_process_comm(&self, device: DeviceId) -> bool {
        selected().is_ok_and(|b| b.has_process_comm(device))
    }

    fn new_comm_id(&self) -> Result<Vec<u8>> {
        selected()?.new_comm_id()
    }

    fn join_comm(&self, _: DeviceId, _: &[u8], _: usize, _: usize, _: Duration) -> Result<crate::backend::AnyComm> {
        Err(process_collective())
    }

    fn run_comm(
        &self,
        _: &crate::backend::AnyComm,
        _: DType,
        _: usize,
        _: crate::backend::CommOp<'_>,
    ) -> Result<Option<Buffer>> {
        Err(process_collective())
    }

    fn begin_capture(&self, _: &AnyStream, _: &[&Buffer]) -> Result<()> {
        Err(Error::NotCapturable { op: "Graph::capture", reason: "a capture cannot start inside another".into() })
    }

    fn end_capture(&self, stream: &AnyStream) -> Result<crate::backend::AnyGraph> {
        selected()?.end_capture(stream)
    }

    fn launch_graph(&self, _: &crate::backend::AnyGraph, _: &AnyStream, _: &[&Buffer], _: &[&Buffer]) -> Result<()> {
        Err(Error::NotCapturable {
            op: "Graph::replay",
            reason: "a graph cannot replay inside a capture; replay it before or after".into(),
        })
    }

    fn launch_kernel(
        &self,
        device: DeviceId,
        kernel: &'static KernelSource,
        stream: &AnyStream,
        grid: Grid,
        args: &[KernelArg<'_>],
    ) -> Result<()> {
        // A kernel is recorded as any op is: what it reads must be made in the capture or
        // be an input (the backends check that as they order the buffers).
        Gate::of(kernel.name, device)?.launch_kernel(device, kernel, stream, grid, args)
    }
}

/// Collectives between processes are not captured, as NCCL's between devices are not.
fn process_collective() -> Error {
    Error::NotCapturable {
        op: "a collective between processes",
        reason: "a graph captures the work of one device; run collectives between replays".into(),
    }
}
