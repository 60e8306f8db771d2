//! [`BackendDevice`] for the host backend: streams and events of the simulated devices,
//! memory, uploads and copies, collectives in host memory, captures and user kernels.

use crate::backend::blocks;
use crate::backend::host::{collective, graph, inline, kernels, launch, streams, user_kernel};
use crate::backend::host::{host, pinned_layout, HostBackend, HostBuffer, HostEvent, HostStream};
use std::sync::Arc;
use std::time::Duration;

use crate::backend::host::streams::{default_stream, streams_of};
use crate::backend::host::HostGraph;

use crate::backend::api::user_kernel::{Grid, KernelArg, KernelSource};
use crate::backend::transfer::paths::{self, CopyPath};
use crate::backend::{BackendDevice, BackendStorage, Collective, CommOp, Dist, Release};
use crate::device_id::DeviceId;
use crate::element::{DType, Scalar};
use crate::error::{Error, Result};
use crate::faults::{self, Point};

impl BackendDevice for HostBackend {
    type Stream = Arc<HostStream>;
    type Event = Arc<HostEvent>;
    type Graph = HostGraph;
    /// The host backend has no communicator between processes.
    type Comm = std::convert::Infallible;
    type Pinned = HostBuffer;
    type Storage = HostBuffer;

    fn name(&self) -> &'static str {
        "host"
    }

    fn device_count(&self) -> usize {
        self.accounts.len() - 2
    }

    fn make_current(&self, _device: DeviceId) -> Result<()> {
        Ok(())
    }

    fn memory(&self, device: DeviceId) -> Result<(usize, usize)> {
        let a = host().account(device)?;
        Ok((a.allocated(), a.peak()))
    }

    fn reset_peak(&self, device: DeviceId) -> Result<()> {
        host().account(device)?.reset_peak();
        Ok(())
    }

    fn cached_bytes(&self, device: DeviceId) -> Result<usize> {
        host().account(device).map(|_| 0)
    }

    fn live_streams(&self) -> usize {
        streams::live_streams()
    }

    fn default_stream(&self, device: DeviceId) -> Result<Arc<HostStream>> {
        host().account(device)?;
        Ok(default_stream(device))
    }

    fn new_stream(&self, device: DeviceId) -> Result<Arc<HostStream>> {
        host().account(device)?;
        faults::check(Point::NewStream, device, "new_stream")?;
        Ok(HostStream::new_side(device))
    }

    fn sync_stream(&self, stream: &Arc<HostStream>) -> Result<()> {
        stream.synchronize()
    }

    fn sync_device(&self, device: DeviceId) -> Result<()> {
        host().account(device)?;
        streams_of(device).iter().try_for_each(|s| s.synchronize())
    }

    fn new_event(&self, device: DeviceId, _timing: bool) -> Result<Arc<HostEvent>> {
        host().account(device)?;
        Ok(Arc::new(HostEvent::default()))
    }

    fn record_event(&self, event: &Arc<HostEvent>, stream: &Arc<HostStream>) -> Result<()> {
        event.record(stream)
    }

    fn wait_event(&self, stream: &Arc<HostStream>, event: &Arc<HostEvent>) -> Result<()> {
        faults::check(Point::Wait, stream.device, "wait_event")?;
        event.wait_on(stream)
    }

    fn sync_event(&self, event: &Arc<HostEvent>) -> Result<()> {
        let e = event;
        e.outside_captures()?;
        e.synchronize()
    }

    fn event_done(&self, event: &Arc<HostEvent>) -> Result<bool> {
        let e = event;
        e.outside_captures()?;
        Ok(e.is_done())
    }

    fn elapsed_ms(&self, start: &Arc<HostEvent>, end: &Arc<HostEvent>) -> Result<f32> {
        let (a, b) = (start, end);
        a.outside_captures()?;
        b.outside_captures()?;
        let (a, b) = (a.time()?, b.time()?);
        Ok(match b.checked_duration_since(a) {
            Some(d) => d.as_secs_f32() * 1e3,
            None => -(a.duration_since(b).as_secs_f32() * 1e3),
        })
    }

    fn alloc_pinned(&self, bytes: usize) -> Result<usize> {
        let layout = pinned_layout(bytes)?;
        if faults::fails(Point::Pinned).is_some() {
            return Err(blocks::out_of_memory(DeviceId::Pinned, bytes, 0));
        }
        // SAFETY: the layout has a non-zero size (the pool never asks for 0 bytes).
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            return Err(blocks::out_of_memory(DeviceId::Pinned, bytes, 0));
        }
        Ok(p as usize)
    }

    unsafe fn free_pinned(&self, ptr: usize, bytes: usize) {
        if let Ok(layout) = pinned_layout(bytes) {
            // SAFETY: allocated by alloc_pinned with this layout (the caller's contract).
            unsafe { std::alloc::dealloc(ptr as *mut u8, layout) };
        }
    }

    fn upload(&self, device: DeviceId, data: &[u8]) -> Result<HostBuffer> {
        // The sizes the cuda backend uploads inline go the same way here (pinned block,
        // pieces as stream jobs behind the host); the driver's direct copy and the copy
        // threads' staging are both a plain copy.
        if !device.is_host() && paths::upload_path(data.len()) == CopyPath::Inline {
            return inline::upload(device, data);
        }
        // Pageable memory is read before this returns, as cuMemcpyHtoD does.
        if !device.is_host() {
            faults::check(Point::Copy, device, "upload")?;
        }
        let mut out = host().alloc_for_overwrite(device, data.len())?;
        kernels::copy(out.bytes_mut(), data)?;
        out.mark_written();
        Ok(out)
    }

    unsafe fn wrap(
        &self,
        device: DeviceId,
        addr: u64,
        bytes: usize,
        stream: &Arc<HostStream>,
        release: Release,
    ) -> Result<HostBuffer> {
        let s = stream;
        if s.device != device {
            return Err(Error::DeviceMismatch { op: "from_raw_parts", lhs: device, rhs: s.device });
        }
        let account = host().account(device)?;
        // Host code may use the memory from here on (`as_slice` of a copy, a raw view),
        // so the writes queued before come first.
        s.synchronize()?;
        // SAFETY: the caller's contract: `addr` is host memory of `bytes` bytes, valid
        // until `release` runs and used by nothing else but `stream`'s earlier work.
        unsafe { HostBuffer::foreign(account, addr as usize as *mut u8, bytes, Some(Arc::clone(s)), release) }
    }

    fn upload_async(
        &self,
        device: DeviceId,
        src: &HostBuffer,
        stream: &Arc<HostStream>,
    ) -> Result<(HostBuffer, Arc<HostEvent>)> {
        // `out` is fresh memory of this stream; dispatch holds `src` until `done`.
        let out = HostBuffer::alloc(host().account(device)?, src.len(), Some(Arc::clone(stream)))?;
        let done = launch::queue_copy(stream, "upload_async", src, &out)?;
        out.mark_written();
        Ok((out, done))
    }

    fn copy(&self, src: &HostBuffer, device: DeviceId) -> Result<HostBuffer> {
        let h = src;
        match (h.device_id().is_host(), device.is_host()) {
            // Dispatch sends a pinned source to a device through `upload_async` (and the
            // pinned pool's hold); what reaches here is read before this returns.
            (true, _) => self.upload(device, h.bytes()),
            (false, true) => {
                let mut out = host().alloc_for_overwrite(device, h.len())?;
                // SAFETY: a download writes only initialized bytes through the view (its contract).
                let bytes = unsafe { crate::backend::transfer::as_uninit(out.bytes_mut()) };
                h.download(bytes)?;
                Ok(out)
            }
            (false, false) => launch::launch(
                launch::Launch::new("copy", host().account(device)?, DType::U8, h.len()),
                &[h],
                Box::new(|ins, out| kernels::copy(out, ins[0])),
            ),
        }
    }

    fn fill(&self, device: DeviceId, dtype: DType, len: usize, value: Scalar) -> Result<HostBuffer> {
        launch::fill(host().account(device)?, dtype, len, value)
    }

    fn arange(&self, device: DeviceId, dtype: DType, len: usize, start: f64, step: f64) -> Result<HostBuffer> {
        launch::arange(host().account(device)?, dtype, len, start, step)
    }

    fn rand(&self, device: DeviceId, dtype: DType, len: usize, seed: u64, dist: Dist) -> Result<HostBuffer> {
        launch::rand(host().account(device)?, dtype, len, seed, dist)
    }

    // Multi-device work: see host_collective.rs.

    fn can_access_peer(&self, device: DeviceId, peer: DeviceId) -> Result<bool> {
        collective::can_access_peer(device, peer)
    }

    fn enable_peer_access(&self, device: DeviceId, peer: DeviceId) -> Result<()> {
        collective::enable_peer_access(device, peer)
    }

    fn collective(
        &self,
        devices: &[DeviceId],
        dtype: DType,
        len: usize,
        op: Collective<'_, HostBuffer>,
    ) -> Result<Option<Vec<HostBuffer>>> {
        if let Some(&first) = devices.first() {
            faults::check(Point::Collective, first, "collective")?;
        }
        collective::collective(devices, dtype, len, op)
    }

    // Process collectives move through host memory (`dist`'s TCP path): no communicator.
    fn has_process_comm(&self, _device: DeviceId) -> bool {
        false
    }

    fn new_comm_id(&self) -> Result<Vec<u8>> {
        Err(no_comm())
    }

    fn join_comm(&self, _: DeviceId, _: &[u8], _: usize, _: usize, _: Duration) -> Result<Self::Comm> {
        Err(no_comm())
    }

    fn run_comm(
        &self,
        comm: &Self::Comm,
        _dtype: DType,
        _len: usize,
        _op: CommOp<'_, HostBuffer>,
    ) -> Result<Option<HostBuffer>> {
        match *comm {}
    }

    fn begin_capture(&self, stream: &Arc<HostStream>, inputs: &[&HostBuffer]) -> Result<()> {
        graph::begin(stream, inputs)
    }

    fn end_capture(&self, stream: &Arc<HostStream>) -> Result<HostGraph> {
        graph::end(stream)
    }

    fn launch_graph(
        &self,
        graph: &HostGraph,
        stream: &Arc<HostStream>,
        reads: &[&HostBuffer],
        writes: &[&HostBuffer],
    ) -> Result<()> {
        graph.launch(stream, reads, writes)
    }

    fn launch_kernel(
        &self,
        device: DeviceId,
        kernel: &'static KernelSource,
        stream: &Arc<HostStream>,
        _grid: Grid,
        args: &[KernelArg<'_, HostBuffer>],
    ) -> Result<()> {
        let s = stream;
        if s.device != device || device.is_host() {
            return Err(Error::DeviceMismatch { op: kernel.name, lhs: device, rhs: s.device });
        }
        user_kernel::launch(kernel, s, args)
    }
}

/// The host backend has no communicator between processes (`has_process_comm` says so).
fn no_comm() -> Error {
    Error::InvalidArgument {
        op: "process collective",
        reason: "the host backend has no communicator between processes; `dist` moves its data over TCP".into(),
    }
}
