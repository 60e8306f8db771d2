//! [`AnyBackend`]: the device-level calls of either backend, the variants of their
//! handles matched here once, and the rules both backends share applied here once:
//! - a pinned block a copy reads or writes is held from reuse until that copy's event
//!   (`upload_async` here, `download_async` in [`Buffer`]), so the host model exercises
//!   the same line the GPU runs;
//! - while the thread captures a graph, the capture gate (see `capture.rs`): what
//!   cannot be recorded is refused before any backend sees it.

use crate::backend::api::user_kernel::KernelArg;
use crate::backend::cuda::CudaBackend;
use crate::backend::dispatch::capture::{self, on_device};

mod memory;
mod multi;
use crate::backend::host::HostBackend;
use crate::backend::{AnyEvent, AnyStream, BackendDevice, Buffer, HostBuffer};
use crate::device_id::DeviceId;
use crate::error::{Error, Result};

/// One of the two backends.
#[derive(Clone, Copy)]
pub(crate) enum Imp {
    Host(&'static HostBackend),
    Cuda(&'static CudaBackend),
}

/// The backend of a device as the layers above see it; behind the capture gate when it
/// was picked on a thread that captures a graph.
#[derive(Clone, Copy)]
pub(crate) struct AnyBackend {
    imp: Imp,
    gated: bool,
}

impl std::fmt::Debug for AnyBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AnyBackend({}{})", self.name(), if self.gated { ", gated" } else { "" })
    }
}

/// A handle of one backend handed to the other: a bug above the backends, reported as an
/// error rather than a panic.
fn mismatch(what: &str) -> Error {
    Error::InvalidArgument { op: "backend", reason: format!("{what} of one backend was handed to the other") }
}

const SYNC: &str =
    "nothing runs while a graph is captured, so there is nothing to wait for; synchronize after `replay()`";
const HOST_COPY: &str = "a replay would copy the same host bytes again; write new data into an input between replays \
     (`Graph::inputs_mut`), and read outputs after a replay";

/// A call that cannot be captured.
fn not_capturable(op: &'static str, reason: &str) -> Error {
    Error::NotCapturable { op, reason: reason.into() }
}

/// Collectives between processes are not captured, as NCCL's between devices are not.
fn process_collective() -> Error {
    not_capturable(
        "a collective between processes",
        "a graph captures the work of one device; run collectives between replays",
    )
}

/// Buffers of the host backend, or the mismatch.
fn hosts<'a>(bufs: &[&'a Buffer]) -> Result<Vec<&'a HostBuffer>> {
    bufs.iter().map(|b| host_or_mismatch(b)).collect()
}

/// Buffers of the cuda backend, or the mismatch.
fn cudas<'a>(bufs: &[&'a Buffer]) -> Result<Vec<&'a crate::backend::cuda::CudaBuffer>> {
    bufs.iter().map(|b| cuda_or_mismatch(b)).collect()
}

/// Kernel arguments with their buffers of one backend, picked by `pick`.
fn kernel_args<'a, B>(
    args: &[KernelArg<'a, Buffer>],
    pick: impl Fn(&'a Buffer) -> Option<&'a B>,
) -> Result<Vec<KernelArg<'a, B>>> {
    args.iter()
        .map(|a| match a {
            KernelArg::Scalar(s) => Ok(KernelArg::Scalar(*s)),
            KernelArg::Read(b, t) => pick(b).map(|b| KernelArg::Read(b, *t)).ok_or_else(|| mismatch("memory")),
            KernelArg::Write(b, t) => pick(b).map(|b| KernelArg::Write(b, *t)).ok_or_else(|| mismatch("memory")),
        })
        .collect()
}

/// The host backend's buffer of `b`, or the mismatch.
fn host_or_mismatch(b: &Buffer) -> Result<&HostBuffer> {
    b.as_host().ok_or_else(|| mismatch("memory"))
}

/// The cuda backend's buffer of `b`, or the mismatch.
fn cuda_or_mismatch(b: &Buffer) -> Result<&crate::backend::cuda::CudaBuffer> {
    cuda_of(b).ok_or_else(|| mismatch("memory"))
}

fn cuda_of(b: &Buffer) -> Option<&crate::backend::cuda::CudaBuffer> {
    match b {
        Buffer::Cuda(c) => Some(c),
        Buffer::Host(_) => None,
    }
}

impl AnyBackend {
    pub(crate) fn new(imp: Imp) -> Self {
        AnyBackend { imp, gated: false }
    }

    /// This backend behind the capture gate.
    pub(crate) fn gated(self) -> Self {
        AnyBackend { gated: true, ..self }
    }

    /// Whether this is behind the capture gate (picked on a thread that captures).
    pub(crate) fn is_gated(&self) -> bool {
        self.gated
    }

    /// Whether both are the same backend.
    pub(crate) fn same(&self, other: &AnyBackend) -> bool {
        match (self.imp, other.imp) {
            (Imp::Host(a), Imp::Host(b)) => std::ptr::eq(a, b),
            (Imp::Cuda(a), Imp::Cuda(b)) => std::ptr::eq(a, b),
            _ => false,
        }
    }

    /// Behind the gate, the capture's device only.
    fn gate_device(&self, op: &'static str, device: DeviceId) -> Result<()> {
        if self.gated {
            on_device(op, device)?;
        }
        Ok(())
    }

    /// Behind the gate, `op` is refused for `reason`.
    fn gate_refuse(&self, op: &'static str, reason: &str) -> Result<()> {
        match self.gated {
            true => Err(not_capturable(op, reason)),
            false => Ok(()),
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self.imp {
            Imp::Host(b) => b.name(),
            Imp::Cuda(b) => b.name(),
        }
    }

    pub(crate) fn device_count(&self) -> usize {
        match self.imp {
            Imp::Host(b) => b.device_count(),
            Imp::Cuda(b) => b.device_count(),
        }
    }

    pub(crate) fn make_current(&self, device: DeviceId) -> Result<()> {
        match self.imp {
            Imp::Host(b) => b.make_current(device),
            Imp::Cuda(b) => b.make_current(device),
        }
    }

    pub(crate) fn memory(&self, device: DeviceId) -> Result<(usize, usize)> {
        match self.imp {
            Imp::Host(b) => b.memory(device),
            Imp::Cuda(b) => b.memory(device),
        }
    }

    pub(crate) fn reset_peak(&self, device: DeviceId) -> Result<()> {
        match self.imp {
            Imp::Host(b) => b.reset_peak(device),
            Imp::Cuda(b) => b.reset_peak(device),
        }
    }

    pub(crate) fn cached_bytes(&self, device: DeviceId) -> Result<usize> {
        match self.imp {
            Imp::Host(b) => b.cached_bytes(device),
            Imp::Cuda(b) => b.cached_bytes(device),
        }
    }

    pub(crate) fn live_streams(&self) -> usize {
        match self.imp {
            Imp::Host(b) => b.live_streams(),
            Imp::Cuda(b) => b.live_streams(),
        }
    }

    pub(crate) fn default_stream(&self, device: DeviceId) -> Result<AnyStream> {
        match self.imp {
            Imp::Host(b) => b.default_stream(device).map(AnyStream::Host),
            Imp::Cuda(b) => b.default_stream(device).map(AnyStream::Cuda),
        }
    }

    pub(crate) fn new_stream(&self, device: DeviceId) -> Result<AnyStream> {
        match self.imp {
            Imp::Host(b) => b.new_stream(device).map(AnyStream::Host),
            Imp::Cuda(b) => b.new_stream(device).map(AnyStream::Cuda),
        }
    }

    pub(crate) fn sync_stream(&self, stream: &AnyStream) -> Result<()> {
        self.gate_refuse("Stream::synchronize", SYNC)?;
        match (self.imp, stream) {
            (Imp::Host(b), AnyStream::Host(s)) => b.sync_stream(s),
            (Imp::Cuda(b), AnyStream::Cuda(s)) => b.sync_stream(s),
            _ => Err(mismatch("a stream")),
        }
    }

    pub(crate) fn sync_device(&self, device: DeviceId) -> Result<()> {
        self.gate_refuse("synchronize", SYNC)?;
        match self.imp {
            Imp::Host(b) => b.sync_device(device),
            Imp::Cuda(b) => b.sync_device(device),
        }
    }

    pub(crate) fn new_event(&self, device: DeviceId, timing: bool) -> Result<AnyEvent> {
        match self.imp {
            Imp::Host(b) => b.new_event(device, timing).map(AnyEvent::Host),
            Imp::Cuda(b) => b.new_event(device, timing).map(AnyEvent::Cuda),
        }
    }

    pub(crate) fn record_event(&self, event: &AnyEvent, stream: &AnyStream) -> Result<()> {
        match (self.imp, event, stream) {
            (Imp::Host(b), AnyEvent::Host(e), AnyStream::Host(s)) => b.record_event(e, s),
            (Imp::Cuda(b), AnyEvent::Cuda(e), AnyStream::Cuda(s)) => b.record_event(e, s),
            _ => Err(mismatch("an event or a stream")),
        }
    }

    pub(crate) fn wait_event(&self, stream: &AnyStream, event: &AnyEvent) -> Result<()> {
        match (self.imp, stream, event) {
            (Imp::Host(b), AnyStream::Host(s), AnyEvent::Host(e)) => b.wait_event(s, e),
            (Imp::Cuda(b), AnyStream::Cuda(s), AnyEvent::Cuda(e)) => b.wait_event(s, e),
            _ => Err(mismatch("an event or a stream")),
        }
    }

    pub(crate) fn sync_event(&self, event: &AnyEvent) -> Result<()> {
        self.gate_refuse("Event::synchronize", SYNC)?;
        match (self.imp, event) {
            (Imp::Host(b), AnyEvent::Host(e)) => b.sync_event(e),
            (Imp::Cuda(b), AnyEvent::Cuda(e)) => b.sync_event(e),
            _ => Err(mismatch("an event")),
        }
    }

    pub(crate) fn event_done(&self, event: &AnyEvent) -> Result<bool> {
        self.gate_refuse("Event::is_complete", SYNC)?;
        match (self.imp, event) {
            (Imp::Host(b), AnyEvent::Host(e)) => b.event_done(e),
            (Imp::Cuda(b), AnyEvent::Cuda(e)) => b.event_done(e),
            _ => Err(mismatch("an event")),
        }
    }

    pub(crate) fn elapsed_ms(&self, start: &AnyEvent, end: &AnyEvent) -> Result<f32> {
        self.gate_refuse(
            "Event::elapsed",
            "a captured event has no time until a replay runs; time replays from outside the graph",
        )?;
        match (self.imp, start, end) {
            (Imp::Host(b), AnyEvent::Host(s), AnyEvent::Host(e)) => b.elapsed_ms(s, e),
            (Imp::Cuda(b), AnyEvent::Cuda(s), AnyEvent::Cuda(e)) => b.elapsed_ms(s, e),
            _ => Err(mismatch("an event")),
        }
    }
}

/// The capture gate in front of `backend` while this thread captures.
pub(crate) fn behind_gate(backend: AnyBackend) -> AnyBackend {
    match capture::active() {
        Some(_) => backend.gated(),
        None => backend,
    }
}
