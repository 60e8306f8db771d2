//! The cuda backend: cudarc 0.19 driver calls, NVRTC-compiled kernels from
//! `locus-kernels`, cuBLAS for float matmul. Loaded dynamically: a machine without
//! CUDA builds and runs locus on the host backend instead.
//!
//! This file holds the table of devices (opened on first use) and implements
//! [`BackendDevice`] by delegating; `storage` implements `BackendStorage` for
//! [`CudaBuffer`] the same way. Its files, by folder (tests/suite/layers.rs checks the list):
//! - `driver`: below the rest, importing none of it: `driver/device` (probing the
//!   driver, a device's context and kernel cache, raw handles), `driver/args` (typed
//!   kernel arguments), `driver/launch` (grid geometry, the one kernel launch), `driver/buffer` (device
//!   memory: caching bins, readers), `driver/buffer/free` (its stream-ordered end) and
//!   `driver/buffer/home` (its home stream, the default one held without a count),
//!   `driver/memory` (an op's output on the current stream, the current streams of a
//!   thread, write marks), `driver/stream` and `driver/event` (streams with their block
//!   caches and cuBLAS handles, events), `driver/graph` (captures, their private memory,
//!   replays), `driver/flag` (checks made on the device: a word a kernel writes, read back
//!   after it), `driver/user_kernel` (kernels of `#[locus::kernel]`, compiled per
//!   architecture and launched), `driver/timing` (device times of traced work: timing
//!   events around each op, turned into trace slices);
//! - `ops`: the compute ops, one kernel source each: `ops/init`, `ops/elementwise`,
//!   `ops/reduce`, `ops/matrix`, `ops/softmax` (with cross-entropy), `ops/layer_norm`
//!   (kernels of softmax.cu), `ops/gather`
//!   (`index_select`), `ops/select` (comparisons, `where`, `argmax`); `ops/gemm` (cuBLAS
//!   and the integer kernel of matrix.cu) and `ops/permute` (permutations of dims);
//! - `transfer`: copies between host and device and between devices (the path a
//!   pageable copy takes is `transfer::paths`'s choice): `transfer/staged` (through the
//!   copy threads' pinned stages), `transfer/inline` (the inline path's DMAs),
//!   `transfer/peer` (peer access);
//! - `comm`: communicators between processes (NCCL), with `comm/local` (collectives
//!   between this process's devices) and `comm/watchdog` (what aborts a stuck one);
//! - `storage`: `BackendStorage` for [`CudaBuffer`].

mod comm;
mod driver;
mod ops;
mod storage;
mod transfer;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use cudarc::driver::result;

pub(crate) use comm::ProcessComm;
pub(crate) use driver::buffer::CudaBuffer;
use driver::device::{driver, DeviceState};
pub(crate) use driver::event::CudaEvent;
pub(crate) use driver::graph::CudaGraph;
pub(crate) use driver::memory::{current_of, with_current};
pub(crate) use driver::stream::CudaStream;

use crate::backend::api::user_kernel::{Grid, KernelArg, KernelSource};
use crate::backend::{BackendDevice, Collective, CommOp, Dist, HostBuffer, Release};
use crate::device_id::DeviceId;
use crate::element::{DType, Scalar};
use crate::error::{Error, Result};

pub(crate) struct CudaBackend {
    devices: Vec<OnceLock<Result<&'static DeviceState>>>,
}

/// The cuda backend, if this machine can run it; else why not, as a sentence.
pub(crate) fn open() -> std::result::Result<CudaBackend, String> {
    let count = driver::device::probe()?;
    Ok(CudaBackend { devices: (0..count).map(|_| OnceLock::new()).collect() })
}

impl CudaBackend {
    /// Device `id`, opened on first use and kept for the process.
    fn dev(&self, id: DeviceId) -> Result<&'static DeviceState> {
        let ordinal = id.ordinal().unwrap_or(u32::MAX);
        let count = self.devices.len();
        let slot = self.devices.get(ordinal as usize).ok_or(Error::NoSuchDevice { ordinal, count })?;
        slot.get_or_init(|| DeviceState::open(ordinal).map(|d| &*Box::leak(Box::new(d)))).clone()
    }
}

impl BackendDevice for CudaBackend {
    type Stream = Arc<CudaStream>;
    type Event = Arc<CudaEvent>;
    type Graph = CudaGraph;
    type Comm = Arc<ProcessComm>;
    type Pinned = HostBuffer;
    type Storage = CudaBuffer;

    fn name(&self) -> &'static str {
        "cuda"
    }

    fn device_count(&self) -> usize {
        self.devices.len()
    }

    fn make_current(&self, device: DeviceId) -> Result<()> {
        self.dev(device)?.bind()
    }

    fn memory(&self, device: DeviceId) -> Result<(usize, usize)> {
        let a = &self.dev(device)?.account;
        Ok((a.allocated(), a.peak()))
    }

    fn reset_peak(&self, device: DeviceId) -> Result<()> {
        self.dev(device)?.account.reset_peak();
        Ok(())
    }

    fn cached_bytes(&self, device: DeviceId) -> Result<usize> {
        Ok(driver::stream::cached_bytes(self.dev(device)?.ordinal))
    }

    fn live_streams(&self) -> usize {
        driver::stream::live_streams()
    }

    fn default_stream(&self, device: DeviceId) -> Result<Arc<CudaStream>> {
        Ok(Arc::clone(&self.dev(device)?.stream))
    }

    fn new_stream(&self, device: DeviceId) -> Result<Arc<CudaStream>> {
        let dev = self.dev(device)?;
        dev.bind()?;
        Ok(Arc::new(CudaStream::create(dev.ordinal, dev.ctx.cu_ctx())?))
    }

    fn sync_stream(&self, stream: &Arc<CudaStream>) -> Result<()> {
        let s = stream;
        self.dev(DeviceId::Cuda(s.ordinal))?.bind()?;
        s.synchronize()
    }

    fn sync_device(&self, device: DeviceId) -> Result<()> {
        let dev = self.dev(device)?;
        dev.bind()?;
        result::ctx::synchronize().map_err(driver(dev.ordinal, "cuCtxSynchronize"))
    }

    fn new_event(&self, device: DeviceId, timing: bool) -> Result<Arc<CudaEvent>> {
        let dev = self.dev(device)?;
        Ok(Arc::new(CudaEvent::create(dev.ordinal, dev.ctx.cu_ctx(), timing)?))
    }

    fn record_event(&self, event: &Arc<CudaEvent>, stream: &Arc<CudaStream>) -> Result<()> {
        let (e, s) = (event, stream);
        self.dev(DeviceId::Cuda(s.ordinal))?.bind()?;
        e.record(s)
    }

    fn wait_event(&self, stream: &Arc<CudaStream>, event: &Arc<CudaEvent>) -> Result<()> {
        let (e, s) = (event, stream);
        self.dev(DeviceId::Cuda(s.ordinal))?.bind()?;
        driver::graph::joins(s, e.capture())?;
        s.wait(e)
    }

    fn sync_event(&self, event: &Arc<CudaEvent>) -> Result<()> {
        let e = event;
        e.outside_captures()?;
        self.dev(DeviceId::Cuda(e.ordinal))?.bind()?;
        e.synchronize()
    }

    fn event_done(&self, event: &Arc<CudaEvent>) -> Result<bool> {
        let e = event;
        e.outside_captures()?;
        self.dev(DeviceId::Cuda(e.ordinal))?.bind()?;
        e.is_complete()
    }

    fn elapsed_ms(&self, start: &Arc<CudaEvent>, end: &Arc<CudaEvent>) -> Result<f32> {
        let (a, b) = (start, end);
        a.outside_captures()?;
        b.outside_captures()?;
        self.dev(DeviceId::Cuda(a.ordinal))?.bind()?;
        a.elapsed_ms(b)
    }

    fn alloc_pinned(&self, bytes: usize) -> Result<usize> {
        self.alloc_pinned_block(bytes)
    }

    unsafe fn free_pinned(&self, ptr: usize, _bytes: usize) {
        // SAFETY: the trait's contract: `ptr` comes from `alloc_pinned`, that is from
        // `alloc_pinned_block`, and nothing uses the memory any more.
        unsafe { self.free_pinned_block(ptr) }
    }

    fn upload(&self, device: DeviceId, data: &[u8]) -> Result<CudaBuffer> {
        transfer::upload(self, device, data)
    }

    fn upload_parts(&self, device: DeviceId, parts: &[&[u8]]) -> Result<Vec<CudaBuffer>> {
        transfer::upload_parts(self, device, parts)
    }

    unsafe fn wrap(
        &self,
        device: DeviceId,
        addr: u64,
        bytes: usize,
        stream: &Arc<CudaStream>,
        release: Release,
    ) -> Result<CudaBuffer> {
        // Until the buffer exists, when the owner's work ends cannot be known: on an
        // error here the memory is never given back, rather than given back in use.
        let checked = Ok(Arc::clone(stream)).and_then(|s: Arc<CudaStream>| {
            let dev = self.dev(device)?;
            if s.ordinal != dev.ordinal {
                return Err(Error::DeviceMismatch {
                    op: "from_raw_parts",
                    lhs: device,
                    rhs: DeviceId::Cuda(s.ordinal),
                });
            }
            dev.bind()?;
            Ok((s, dev))
        });
        let (s, dev) = match checked {
            Ok(v) => v,
            Err(e) => {
                release.leak();
                return Err(e);
            }
        };
        // SAFETY: the caller's contract: `addr` is `bytes` bytes of `dev`'s memory, valid
        // until `release` runs and used by nothing else but `s`'s earlier work.
        unsafe { CudaBuffer::foreign(dev, &s, addr, bytes, release) }
    }

    fn upload_async(
        &self,
        device: DeviceId,
        src: &HostBuffer,
        stream: &Arc<CudaStream>,
    ) -> Result<(CudaBuffer, Arc<CudaEvent>)> {
        transfer::upload_async(self, device, src, stream)
    }

    fn copy(&self, src: &CudaBuffer, device: DeviceId) -> Result<CudaBuffer> {
        transfer::copy(self, src, device)
    }

    fn fill(&self, device: DeviceId, dtype: DType, len: usize, value: Scalar) -> Result<CudaBuffer> {
        ops::init::fill(self.dev(device)?, dtype, len, value)
    }

    fn arange(&self, device: DeviceId, dtype: DType, len: usize, start: f64, step: f64) -> Result<CudaBuffer> {
        ops::init::arange(self.dev(device)?, dtype, len, start, step)
    }

    fn rand(&self, device: DeviceId, dtype: DType, len: usize, seed: u64, dist: Dist) -> Result<CudaBuffer> {
        ops::init::rand(self.dev(device)?, dtype, len, seed, dist)
    }

    fn can_access_peer(&self, device: DeviceId, peer: DeviceId) -> Result<bool> {
        transfer::peer::can_access_peer(self, device, peer)
    }

    fn enable_peer_access(&self, device: DeviceId, peer: DeviceId) -> Result<()> {
        transfer::peer::enable_peer_access(self, device, peer)
    }

    fn collective(
        &self,
        devices: &[DeviceId],
        dtype: DType,
        len: usize,
        op: Collective<'_, CudaBuffer>,
    ) -> Result<Option<Vec<CudaBuffer>>> {
        comm::local::collective(self, devices, dtype, len, op)
    }

    fn has_process_comm(&self, device: DeviceId) -> bool {
        self.has_comm(device)
    }

    fn new_comm_id(&self) -> Result<Vec<u8>> {
        self.comm_id()
    }

    fn join_comm(
        &self,
        device: DeviceId,
        id: &[u8],
        rank: usize,
        world: usize,
        timeout: Duration,
    ) -> Result<Arc<ProcessComm>> {
        self.comm_join(device, id, rank, world, timeout)
    }

    fn run_comm(
        &self,
        comm: &Arc<ProcessComm>,
        dtype: DType,
        len: usize,
        op: CommOp<'_, CudaBuffer>,
    ) -> Result<Option<CudaBuffer>> {
        self.comm_run(comm, dtype, len, op)
    }

    fn begin_capture(&self, stream: &Arc<CudaStream>, inputs: &[&CudaBuffer]) -> Result<()> {
        let s = stream;
        let dev = self.dev(DeviceId::Cuda(s.ordinal))?;
        let mut ptrs = Vec::with_capacity(inputs.len());
        for b in inputs {
            // The stream waits for the inputs' writers now; each replay orders them again.
            b.use_on(s)?;
            ptrs.push(b.ptr());
        }
        driver::graph::begin(dev, s, ptrs)
    }

    fn end_capture(&self, stream: &Arc<CudaStream>) -> Result<CudaGraph> {
        let s = stream;
        driver::graph::end(s)
    }

    fn launch_graph(
        &self,
        graph: &CudaGraph,
        stream: &Arc<CudaStream>,
        _: &[&CudaBuffer],
        _: &[&CudaBuffer],
    ) -> Result<()> {
        let s = stream;
        graph.launch(s)
    }

    fn launch_kernel(
        &self,
        device: DeviceId,
        kernel: &'static KernelSource,
        stream: &Arc<CudaStream>,
        grid: Grid,
        args: &[KernelArg<'_, CudaBuffer>],
    ) -> Result<()> {
        let s = stream;
        let dev = self.dev(device)?;
        if s.ordinal != dev.ordinal {
            return Err(Error::DeviceMismatch { op: kernel.name, lhs: device, rhs: DeviceId::Cuda(s.ordinal) });
        }
        driver::user_kernel::launch(dev, kernel, s, grid, args)
    }
}
