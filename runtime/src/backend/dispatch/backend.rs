//! [`AnyBackend`]: the device-level calls of either backend, the variants of their
//! handles matched here once, and the rules both backends share applied here once:
//! - a pinned block a copy reads or writes is held from reuse until that copy's event
//!   (`upload_async` here, `download_async` in [`Buffer`]), so the host model exercises
//!   the same line the GPU runs;
//! - while the thread captures a graph, the capture gate (see `capture.rs`): what
//!   cannot be recorded is refused before any backend sees it.

use std::sync::Arc;
use std::time::Duration;

use crate::backend::api::user_kernel::{Grid, KernelArg, KernelSource};
use crate::backend::cuda::CudaBackend;
use crate::backend::dispatch::capture::{self, on_device};
use crate::backend::dispatch::current;
use crate::backend::host::HostBackend;
use crate::backend::{
    AnyComm, AnyEvent, AnyGraph, AnyStream, BackendDevice, Buffer, Collective, CommOp, HostBuffer, Release,
};
use crate::device_id::DeviceId;
use crate::element::{DType, Scalar};
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
    bufs.iter().map(|b| b.as_host().ok_or_else(|| mismatch("memory"))).collect()
}

/// Buffers of the cuda backend, or the mismatch.
fn cudas<'a>(bufs: &[&'a Buffer]) -> Result<Vec<&'a crate::backend::cuda::CudaBuffer>> {
    bufs.iter()
        .map(|b| match b {
            Buffer::Cuda(c) => Ok(c),
            Buffer::Host(_) => Err(mismatch("memory")),
        })
        .collect()
}

/// Kernel arguments with their buffers of one backend, picked by `pick`.
fn kernel_args<'a, B>(
    args: &[KernelArg<'a, Buffer>],
    pick: impl Fn(&'a Buffer) -> Option<&'a B>,
) -> Result<Vec<KernelArg<'a, B>>> {
    args.iter()
        .map(|a| match a {
            KernelArg::Scalar(s) => Ok(KernelArg::Scalar(s.clone())),
            KernelArg::Read(b, t) => pick(b).map(|b| KernelArg::Read(b, *t)).ok_or_else(|| mismatch("memory")),
            KernelArg::Write(b, t) => pick(b).map(|b| KernelArg::Write(b, *t)).ok_or_else(|| mismatch("memory")),
        })
        .collect()
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

    pub(crate) fn alloc_pinned(&self, bytes: usize) -> Result<usize> {
        self.gate_refuse("pinned memory", HOST_COPY)?;
        match self.imp {
            Imp::Host(b) => b.alloc_pinned(bytes),
            Imp::Cuda(b) => b.alloc_pinned(bytes),
        }
    }

    /// Frees memory from [`AnyBackend::alloc_pinned`].
    ///
    /// # Safety
    /// `ptr` and `bytes` come from one `alloc_pinned` call of this backend and nothing
    /// uses the memory.
    pub(crate) unsafe fn free_pinned(&self, ptr: usize, bytes: usize) {
        match self.imp {
            // SAFETY: the caller's contract, passed on unchanged.
            Imp::Host(b) => unsafe { b.free_pinned(ptr, bytes) },
            // SAFETY: the caller's contract, passed on unchanged.
            Imp::Cuda(b) => unsafe { b.free_pinned(ptr, bytes) },
        }
    }

    pub(crate) fn upload(&self, device: DeviceId, data: &[u8]) -> Result<Buffer> {
        self.gate_refuse("a copy from host memory", HOST_COPY)?;
        match self.imp {
            Imp::Host(b) => b.upload(device, data).map(Buffer::Host),
            Imp::Cuda(b) => b.upload(device, data).map(Buffer::Cuda),
        }
    }

    /// A copy of pinned `src` on `device`, queued on `stream`; the event marks its end,
    /// and `src` is held from reuse by the pinned pool (and from host writes) until then.
    pub(crate) fn upload_async(
        &self,
        device: DeviceId,
        src: &HostBuffer,
        stream: &AnyStream,
    ) -> Result<(Buffer, AnyEvent)> {
        self.gate_refuse("to_async", HOST_COPY)?;
        let (buf, done) = match (self.imp, stream) {
            (Imp::Host(b), AnyStream::Host(s)) => {
                b.upload_async(device, src, s).map(|(buf, e)| (Buffer::Host(buf), AnyEvent::Host(e)))?
            }
            (Imp::Cuda(b), AnyStream::Cuda(s)) => {
                b.upload_async(device, src, s).map(|(buf, e)| (Buffer::Cuda(buf), AnyEvent::Cuda(e)))?
            }
            _ => return Err(mismatch("a stream")),
        };
        // The rule of every backend: the DMA reads `src` after this returns.
        src.hold_until(done.fence());
        Ok((buf, done))
    }

    /// Memory made outside locus as a buffer (see `BackendDevice::wrap`).
    ///
    /// # Safety
    /// As `BackendDevice::wrap`.
    pub(crate) unsafe fn wrap(
        &self,
        device: DeviceId,
        addr: u64,
        bytes: usize,
        stream: &AnyStream,
        release: Release,
    ) -> Result<Buffer> {
        if self.gated {
            // `Tensor::from_raw_parts` refuses before it gets here, while its caller
            // still owns the memory; should anything else get here, the end of the
            // owner's work cannot be known during a capture, so the memory is never
            // given back.
            release.leak();
            return Err(not_capturable(
                "from_raw_parts",
                "memory made outside locus cannot join a graph while it is captured; wrap it before the capture",
            ));
        }
        match (self.imp, stream) {
            // SAFETY: the caller's contract, passed on unchanged.
            (Imp::Host(b), AnyStream::Host(s)) => unsafe { b.wrap(device, addr, bytes, s, release) }.map(Buffer::Host),
            // SAFETY: the caller's contract, passed on unchanged.
            (Imp::Cuda(b), AnyStream::Cuda(s)) => unsafe { b.wrap(device, addr, bytes, s, release) }.map(Buffer::Cuda),
            _ => {
                release.leak();
                Err(mismatch("a stream"))
            }
        }
    }

    pub(crate) fn upload_parts(&self, device: DeviceId, parts: &[&[u8]]) -> Result<Vec<Buffer>> {
        if !parts.is_empty() {
            self.gate_refuse("a copy from host memory", HOST_COPY)?;
        }
        match self.imp {
            Imp::Host(b) => Ok(b.upload_parts(device, parts)?.into_iter().map(Buffer::Host).collect()),
            Imp::Cuda(b) => Ok(b.upload_parts(device, parts)?.into_iter().map(Buffer::Cuda).collect()),
        }
    }

    pub(crate) fn copy(&self, src: &Buffer, device: DeviceId) -> Result<Buffer> {
        if self.gated {
            let from = src.device_id();
            if device.is_host() || from.is_host() {
                return Err(not_capturable("a copy between host and device", HOST_COPY));
            }
            on_device("a copy between devices", from)?;
            on_device("a copy between devices", device)?;
        }
        if let Buffer::Host(h) = src {
            if h.is_pinned() && !device.is_host() {
                // A DMA from page-locked memory, on the current stream: the pinned
                // pool's hold (`upload_async`) keeps the block until it is done.
                let stream = match current::current(device) {
                    Some(s) => s,
                    None => self.default_stream(device)?,
                };
                return Ok(self.upload_async(device, h, &stream)?.0);
            }
        }
        match (self.imp, src) {
            (Imp::Host(b), Buffer::Host(s)) => b.copy(s, device).map(Buffer::Host),
            (Imp::Cuda(b), Buffer::Cuda(s)) => b.copy(s, device).map(Buffer::Cuda),
            _ => Err(mismatch("memory")),
        }
    }

    pub(crate) fn fill(&self, device: DeviceId, dtype: DType, len: usize, value: Scalar) -> Result<Buffer> {
        self.gate_device("full", device)?;
        match self.imp {
            Imp::Host(b) => b.fill(device, dtype, len, value).map(Buffer::Host),
            Imp::Cuda(b) => b.fill(device, dtype, len, value).map(Buffer::Cuda),
        }
    }

    pub(crate) fn arange(&self, device: DeviceId, dtype: DType, len: usize, start: f64, step: f64) -> Result<Buffer> {
        self.gate_device("arange", device)?;
        match self.imp {
            Imp::Host(b) => b.arange(device, dtype, len, start, step).map(Buffer::Host),
            Imp::Cuda(b) => b.arange(device, dtype, len, start, step).map(Buffer::Cuda),
        }
    }

    pub(crate) fn rand(&self, device: DeviceId, dtype: DType, len: usize, seed: u64) -> Result<Buffer> {
        self.gate_device("rand", device)?;
        match self.imp {
            Imp::Host(b) => b.rand(device, dtype, len, seed).map(Buffer::Host),
            Imp::Cuda(b) => b.rand(device, dtype, len, seed).map(Buffer::Cuda),
        }
    }

    pub(crate) fn can_access_peer(&self, device: DeviceId, peer: DeviceId) -> Result<bool> {
        match self.imp {
            Imp::Host(b) => b.can_access_peer(device, peer),
            Imp::Cuda(b) => b.can_access_peer(device, peer),
        }
    }

    pub(crate) fn enable_peer_access(&self, device: DeviceId, peer: DeviceId) -> Result<()> {
        self.gate_refuse(
            "enable_peer_access",
            "it changes the devices, not a stream; enable peer access before the capture",
        )?;
        match self.imp {
            Imp::Host(b) => b.enable_peer_access(device, peer),
            Imp::Cuda(b) => b.enable_peer_access(device, peer),
        }
    }

    pub(crate) fn collective(
        &self,
        devices: &[DeviceId],
        dtype: DType,
        len: usize,
        op: Collective<'_, Buffer>,
    ) -> Result<Option<Vec<Buffer>>> {
        self.gate_refuse(
            "a collective (NCCL)",
            "a graph captures the work of one device; run collectives between replays",
        )?;
        match self.imp {
            Imp::Host(b) => {
                let ins;
                let op = match op {
                    Collective::Broadcast { root, buf } => Collective::Broadcast { root, buf: hosts(&[buf])?[0] },
                    Collective::AllReduceSum(bufs) => {
                        ins = hosts(bufs)?;
                        Collective::AllReduceSum(&ins)
                    }
                    Collective::AllGather(bufs) => {
                        ins = hosts(bufs)?;
                        Collective::AllGather(&ins)
                    }
                };
                Ok(b.collective(devices, dtype, len, op)?.map(|v| v.into_iter().map(Buffer::Host).collect()))
            }
            Imp::Cuda(b) => {
                let ins;
                let op = match op {
                    Collective::Broadcast { root, buf } => Collective::Broadcast { root, buf: cudas(&[buf])?[0] },
                    Collective::AllReduceSum(bufs) => {
                        ins = cudas(bufs)?;
                        Collective::AllReduceSum(&ins)
                    }
                    Collective::AllGather(bufs) => {
                        ins = cudas(bufs)?;
                        Collective::AllGather(&ins)
                    }
                };
                Ok(b.collective(devices, dtype, len, op)?.map(|v| v.into_iter().map(Buffer::Cuda).collect()))
            }
        }
    }

    pub(crate) fn has_process_comm(&self, device: DeviceId) -> bool {
        match self.imp {
            Imp::Host(b) => b.has_process_comm(device),
            Imp::Cuda(b) => b.has_process_comm(device),
        }
    }

    pub(crate) fn new_comm_id(&self) -> Result<Vec<u8>> {
        match self.imp {
            Imp::Host(b) => b.new_comm_id(),
            Imp::Cuda(b) => b.new_comm_id(),
        }
    }

    pub(crate) fn join_comm(
        &self,
        device: DeviceId,
        id: &[u8],
        rank: usize,
        world: usize,
        timeout: Duration,
    ) -> Result<AnyComm> {
        if self.gated {
            return Err(process_collective());
        }
        match self.imp {
            Imp::Host(b) => match b.join_comm(device, id, rank, world, timeout)? {},
            Imp::Cuda(b) => b.join_comm(device, id, rank, world, timeout).map(AnyComm::Cuda),
        }
    }

    pub(crate) fn run_comm<'a>(
        &self,
        comm: &AnyComm,
        dtype: DType,
        len: usize,
        op: CommOp<'a, Buffer>,
    ) -> Result<Option<Buffer>> {
        if self.gated {
            return Err(process_collective());
        }
        let AnyComm::Cuda(c) = comm;
        let Imp::Cuda(b) = self.imp else { return Err(mismatch("a communicator")) };
        let one = |buf: &'a Buffer| cuda_of(buf).ok_or_else(|| mismatch("memory"));
        let op = match op {
            CommOp::AllReduce { buf, op } => CommOp::AllReduce { buf: one(buf)?, op },
            CommOp::Broadcast { buf, root } => CommOp::Broadcast { buf: one(buf)?, root },
            CommOp::AllGather { buf } => CommOp::AllGather { buf: one(buf)? },
            CommOp::ReduceScatter { buf, op } => CommOp::ReduceScatter { buf: one(buf)?, op },
            CommOp::Send { buf, peer } => CommOp::Send { buf: one(buf)?, peer },
            CommOp::Recv { peer } => CommOp::Recv { peer },
        };
        Ok(b.run_comm(c, dtype, len, op)?.map(Buffer::Cuda))
    }

    pub(crate) fn begin_capture(&self, stream: &AnyStream, inputs: &[&Buffer]) -> Result<()> {
        self.gate_refuse("Graph::capture", "a capture cannot start inside another")?;
        match (self.imp, stream) {
            (Imp::Host(b), AnyStream::Host(s)) => b.begin_capture(s, &hosts(inputs)?),
            (Imp::Cuda(b), AnyStream::Cuda(s)) => b.begin_capture(s, &cudas(inputs)?),
            _ => Err(mismatch("a stream")),
        }
    }

    pub(crate) fn end_capture(&self, stream: &AnyStream) -> Result<AnyGraph> {
        match (self.imp, stream) {
            (Imp::Host(b), AnyStream::Host(s)) => b.end_capture(s).map(|g| AnyGraph::Host(Arc::new(g))),
            (Imp::Cuda(b), AnyStream::Cuda(s)) => b.end_capture(s).map(|g| AnyGraph::Cuda(Arc::new(g))),
            _ => Err(mismatch("a stream")),
        }
    }

    pub(crate) fn launch_graph(
        &self,
        graph: &AnyGraph,
        stream: &AnyStream,
        reads: &[&Buffer],
        writes: &[&Buffer],
    ) -> Result<()> {
        self.gate_refuse("Graph::replay", "a graph cannot replay inside a capture; replay it before or after")?;
        match (self.imp, graph, stream) {
            (Imp::Host(b), AnyGraph::Host(g), AnyStream::Host(s)) => {
                b.launch_graph(g, s, &hosts(reads)?, &hosts(writes)?)
            }
            (Imp::Cuda(b), AnyGraph::Cuda(g), AnyStream::Cuda(s)) => {
                b.launch_graph(g, s, &cudas(reads)?, &cudas(writes)?)
            }
            _ => Err(mismatch("a graph or a stream")),
        }
    }

    pub(crate) fn launch_kernel(
        &self,
        device: DeviceId,
        kernel: &'static KernelSource,
        stream: &AnyStream,
        grid: Grid,
        args: &[KernelArg<'_, Buffer>],
    ) -> Result<()> {
        // A kernel is recorded as any op is: what it reads must be made in the capture or
        // be an input (the backends check that as they order the buffers).
        self.gate_device(kernel.name, device)?;
        match (self.imp, stream) {
            (Imp::Host(b), AnyStream::Host(s)) => {
                b.launch_kernel(device, kernel, s, grid, &kernel_args(args, Buffer::as_host)?)
            }
            (Imp::Cuda(b), AnyStream::Cuda(s)) => {
                b.launch_kernel(device, kernel, s, grid, &kernel_args(args, cuda_of)?)
            }
            _ => Err(mismatch("a stream")),
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
