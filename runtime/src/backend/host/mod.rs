//! The host backend: N simulated CUDA devices in host memory.
//!
//! Each simulated device has its own memory account with a capacity
//! (`LOCUS_HOST_DEVICE_MEMORY` bytes, default 16 GiB), so an over-large allocation is
//! `Error::OutOfMemory` as on a GPU. Host memory comes from the host cache
//! (`LOCUS_HOST_CACHE`), and kernels split large work over the worker pool
//! (`LOCUS_HOST_THREADS`); a bad value of either is this backend's configuration error. `cpu` and `pinned` memory are ordinary host memory
//! on every backend, and run here.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

mod buffer;
pub(crate) mod cache;
mod collective;
mod graph;
#[cfg(test)]
mod hazard_tests;
mod huge_pages;
mod inline;
pub(in crate::backend) mod kernels;
mod launch;
mod queue;
mod select;
mod storage;
mod streams;
mod user_kernel;

pub(crate) use buffer::HostBuffer;
pub(crate) use graph::HostGraph;
use streams::{current_stream, default_stream, host_event, host_mem, host_stream, streams_of};
pub(crate) use streams::{HostEvent, HostStream};

use crate::backend::account::MemoryAccount;
use crate::backend::api::user_kernel::{Grid, KernelArg, KernelSource};
use crate::backend::transfer::paths::{self, CopyPath};
use crate::backend::workers;
use crate::backend::{
    AnyComm, AnyEvent, AnyGraph, AnyStream, BackendDevice, BackendStorage, Buffer, Collective, CommOp, Release,
};
use crate::device_id::DeviceId;
use crate::element::{DType, Scalar};
use crate::error::{Error, Result};

const DEFAULT_DEVICES: usize = 2;
/// The most simulated devices (`LOCUS_HOST_DEVICES`): each has its own account and
/// stream state, and CUDA itself has no more ordinals per process than this.
const MAX_DEVICES: usize = 1024;
const DEFAULT_DEVICE_MEMORY: usize = 16 << 30;

/// The host backend.
#[derive(Debug)]
pub(crate) struct HostBackend {
    /// `cpu`, `pinned`, then one per simulated CUDA device.
    accounts: Vec<MemoryAccount>,
    /// Set when `LOCUS_HOST_DEVICES` or `LOCUS_HOST_DEVICE_MEMORY` does not parse.
    config_error: Option<Error>,
}

static HOST: OnceLock<HostBackend> = OnceLock::new();

/// The host backend of this process, configured from the environment on first use.
pub(crate) fn host() -> &'static HostBackend {
    HOST.get_or_init(HostBackend::from_env)
}

/// The host backend as the process backend: an error if its configuration is bad.
pub(crate) fn backend() -> Result<&'static HostBackend> {
    let h = host();
    match &h.config_error {
        Some(e) => Err(e.clone()),
        None => Ok(h),
    }
}

fn env_number(name: &str, default: usize) -> Result<usize> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(v) => v.trim().parse().map_err(|_| Error::NoBackend {
            requested: std::env::var("LOCUS_BACKEND").unwrap_or_else(|_| "auto".into()),
            reason: format!("{name}=`{v}` is not a non-negative integer"),
        }),
    }
}

impl HostBackend {
    fn from_env() -> Self {
        let devices = env_number("LOCUS_HOST_DEVICES", DEFAULT_DEVICES).and_then(|n| {
            if n > MAX_DEVICES {
                return Err(Error::NoBackend {
                    requested: std::env::var("LOCUS_BACKEND").unwrap_or_else(|_| "auto".into()),
                    reason: format!("LOCUS_HOST_DEVICES={n} is more than the host backend simulates ({MAX_DEVICES})"),
                });
            }
            Ok(n)
        });
        let memory = env_number("LOCUS_HOST_DEVICE_MEMORY", DEFAULT_DEVICE_MEMORY);
        let delay = queue::configure().map_err(|reason| Error::NoBackend {
            requested: std::env::var("LOCUS_BACKEND").unwrap_or_else(|_| "auto".into()),
            reason,
        });
        // The worker pool and the host cache read their own variables (and fall back to
        // their defaults); a bad value is this backend's configuration error.
        let pool = [workers::thread_count_var("LOCUS_HOST_THREADS"), cache::cap_var().map(|_| None)]
            .into_iter()
            .find_map(|r| r.err())
            .map_or(Ok(()), |reason| {
                Err(Error::NoBackend {
                    requested: std::env::var("LOCUS_BACKEND").unwrap_or_else(|_| "auto".into()),
                    reason,
                })
            });
        let config_error =
            devices.as_ref().err().or(memory.as_ref().err()).or(delay.as_ref().err()).or(pool.as_ref().err()).cloned();
        let (devices, memory) = (devices.unwrap_or(0), memory.unwrap_or(0));
        let mut accounts =
            vec![MemoryAccount::new(DeviceId::Cpu, usize::MAX), MemoryAccount::new(DeviceId::Pinned, usize::MAX)];
        accounts.extend((0..devices).map(|n| MemoryAccount::new(DeviceId::Cuda(n as u32), memory)));
        HostBackend { accounts, config_error }
    }

    /// The memory account of `device`.
    pub(crate) fn account(&'static self, device: DeviceId) -> Result<&'static MemoryAccount> {
        let i = match device {
            DeviceId::Cpu => 0,
            DeviceId::Pinned => 1,
            DeviceId::Cuda(n) => 2 + n as usize,
        };
        self.accounts
            .get(i)
            .ok_or(Error::NoSuchDevice { ordinal: device.ordinal().unwrap_or(0), count: self.accounts.len() - 2 })
    }

    /// Host memory of `bytes` bytes on `device` (a host placement or a simulated device,
    /// where the current stream owns it) whose contents are initialised but unspecified:
    /// pageable memory is zeroed, a reused pinned block keeps its old bytes. For a copy or
    /// kernel that writes every byte before the buffer is shared.
    pub(crate) fn alloc_for_overwrite(&'static self, device: DeviceId, bytes: usize) -> Result<HostBuffer> {
        let stream = (!device.is_host()).then(|| current_stream(device));
        HostBuffer::alloc(self.account(device)?, bytes, stream)
    }

    #[cfg(feature = "ndarray")]
    /// The elements of `v` as memory of the `cpu` placement, without a copy.
    pub(crate) fn adopt_vec<T: crate::element::Element>(&'static self, v: Vec<T>) -> Result<HostBuffer> {
        HostBuffer::from_vec(self.account(DeviceId::Cpu)?, v)
    }

    /// The bytes of `b`, for host code to read now: a simulated device's memory after
    /// the host waited for the stream that wrote it.
    pub(crate) fn read_now<'a>(&'static self, b: &'a Buffer) -> Result<&'a [u8]> {
        let h = host_mem(b)?;
        let writer = h.uses().writer.clone();
        if let Some(s) = writer {
            s.synchronize()?;
        }
        Ok(h.bytes())
    }
}

/// Simulated pinned memory is page-aligned, like the real thing.
fn pinned_layout(bytes: usize) -> Result<std::alloc::Layout> {
    std::alloc::Layout::from_size_align(bytes.max(1), 4096).map_err(|_| Error::OutOfMemory {
        device: DeviceId::Pinned,
        requested: bytes,
        free: 0,
    })
}

impl BackendDevice for HostBackend {
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

    fn default_stream(&self, device: DeviceId) -> Result<AnyStream> {
        host().account(device)?;
        Ok(AnyStream::Host(default_stream(device)))
    }

    fn new_stream(&self, device: DeviceId) -> Result<AnyStream> {
        host().account(device)?;
        Ok(AnyStream::Host(HostStream::new_side(device)))
    }

    fn sync_stream(&self, stream: &AnyStream) -> Result<()> {
        host_stream(stream)?.synchronize()
    }

    fn sync_device(&self, device: DeviceId) -> Result<()> {
        host().account(device)?;
        streams_of(device).iter().try_for_each(|s| s.synchronize())
    }

    fn new_event(&self, device: DeviceId, _timing: bool) -> Result<AnyEvent> {
        host().account(device)?;
        Ok(AnyEvent::Host(Arc::new(HostEvent::default())))
    }

    fn record_event(&self, event: &AnyEvent, stream: &AnyStream) -> Result<()> {
        host_event(event)?.record(host_stream(stream)?)
    }

    fn wait_event(&self, stream: &AnyStream, event: &AnyEvent) -> Result<()> {
        host_event(event)?.wait_on(host_stream(stream)?)
    }

    fn sync_event(&self, event: &AnyEvent) -> Result<()> {
        let e = host_event(event)?;
        e.outside_captures()?;
        e.synchronize()
    }

    fn event_done(&self, event: &AnyEvent) -> Result<bool> {
        let e = host_event(event)?;
        e.outside_captures()?;
        Ok(e.is_done())
    }

    fn elapsed_ms(&self, start: &AnyEvent, end: &AnyEvent) -> Result<f32> {
        let (a, b) = (host_event(start)?, host_event(end)?);
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
        // SAFETY: the layout has a non-zero size (the pool never asks for 0 bytes).
        let p = unsafe { std::alloc::alloc(layout) };
        if p.is_null() {
            return Err(Error::OutOfMemory { device: DeviceId::Pinned, requested: bytes, free: 0 });
        }
        Ok(p as usize)
    }

    unsafe fn free_pinned(&self, ptr: usize, bytes: usize) {
        if let Ok(layout) = pinned_layout(bytes) {
            // SAFETY: allocated by alloc_pinned with this layout (the caller's contract).
            unsafe { std::alloc::dealloc(ptr as *mut u8, layout) };
        }
    }

    fn upload(&self, device: DeviceId, data: &[u8]) -> Result<Buffer> {
        // The sizes the cuda backend uploads inline go the same way here (pinned block,
        // pieces as stream jobs behind the host); the driver's direct copy and the copy
        // threads' staging are both a plain copy.
        if !device.is_host() && paths::upload_path(data.len()) == CopyPath::Inline {
            return inline::upload(device, data);
        }
        // Pageable memory is read before this returns, as cuMemcpyHtoD does.
        let mut out = host().alloc_for_overwrite(device, data.len())?;
        kernels::copy(out.bytes_mut(), data)?;
        Ok(Buffer::Host(out))
    }

    unsafe fn wrap(
        &self,
        device: DeviceId,
        addr: u64,
        bytes: usize,
        stream: &AnyStream,
        release: Release,
    ) -> Result<Buffer> {
        let s = host_stream(stream)?;
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
            .map(Buffer::Host)
    }

    fn upload_async(&self, device: DeviceId, src: &HostBuffer, stream: &AnyStream) -> Result<(Buffer, AnyEvent)> {
        let s = host_stream(stream)?;
        // `out` is fresh memory of this stream; `src` is held below.
        let out = HostBuffer::alloc(host().account(device)?, src.len(), Some(Arc::clone(s)))?;
        let done = launch::queue_copy(s, "upload_async", src, &out)?;
        // The DMA reads `src` after this returns: the block is neither reused nor
        // written by the host before the copy is done.
        src.hold_until(done.clone());
        Ok((Buffer::Host(out), done))
    }

    fn copy(&self, src: &Buffer, device: DeviceId) -> Result<Buffer> {
        let h = host_mem(src)?;
        match (h.device_id().is_host(), device.is_host()) {
            (true, false) if h.is_pinned() => {
                Ok(self.upload_async(device, h, &AnyStream::Host(current_stream(device)))?.0)
            }
            (true, _) => self.upload(device, h.bytes()),
            (false, true) => {
                let mut out = host().alloc_for_overwrite(device, h.len())?;
                h.download(out.bytes_mut())?;
                Ok(Buffer::Host(out))
            }
            (false, false) => launch::launch(
                launch::Launch::new("copy", host().account(device)?, DType::U8, h.len()),
                &[h],
                Box::new(|ins, out| kernels::copy(out, ins[0])),
            )
            .map(Buffer::Host),
        }
    }

    fn fill(&self, device: DeviceId, dtype: DType, len: usize, value: Scalar) -> Result<Buffer> {
        launch::fill(host().account(device)?, dtype, len, value).map(Buffer::Host)
    }

    fn arange(&self, device: DeviceId, dtype: DType, len: usize, start: f64, step: f64) -> Result<Buffer> {
        launch::arange(host().account(device)?, dtype, len, start, step).map(Buffer::Host)
    }

    fn rand(&self, device: DeviceId, dtype: DType, len: usize, seed: u64) -> Result<Buffer> {
        launch::rand(host().account(device)?, dtype, len, seed).map(Buffer::Host)
    }

    // Multi-device work: see host_collective.rs.

    fn can_access_peer(&self, device: DeviceId, peer: DeviceId) -> Result<bool> {
        crate::backend::host::collective::can_access_peer(device, peer)
    }

    fn enable_peer_access(&self, device: DeviceId, peer: DeviceId) -> Result<()> {
        crate::backend::host::collective::enable_peer_access(device, peer)
    }

    fn collective(
        &self,
        devices: &[DeviceId],
        dtype: DType,
        len: usize,
        op: Collective<'_>,
    ) -> Result<Option<Vec<Buffer>>> {
        crate::backend::host::collective::collective(devices, dtype, len, op)
    }

    // Process collectives move through host memory (`dist`'s TCP path): no communicator.
    fn has_process_comm(&self, _device: DeviceId) -> bool {
        false
    }

    fn new_comm_id(&self) -> Result<Vec<u8>> {
        Err(no_comm())
    }

    fn join_comm(&self, _: DeviceId, _: &[u8], _: usize, _: usize, _: Duration) -> Result<AnyComm> {
        Err(no_comm())
    }

    fn run_comm(&self, _comm: &AnyComm, _dtype: DType, _len: usize, _op: CommOp<'_>) -> Result<Option<Buffer>> {
        Err(no_comm())
    }

    fn begin_capture(&self, stream: &AnyStream, inputs: &[&Buffer]) -> Result<()> {
        let inputs = inputs.iter().map(|b| host_mem(b)).collect::<Result<Vec<_>>>()?;
        graph::begin(host_stream(stream)?, &inputs)
    }

    fn end_capture(&self, stream: &AnyStream) -> Result<AnyGraph> {
        Ok(AnyGraph::Host(Arc::new(graph::end(host_stream(stream)?)?)))
    }

    fn launch_graph(&self, graph: &AnyGraph, stream: &AnyStream, reads: &[&Buffer], writes: &[&Buffer]) -> Result<()> {
        let AnyGraph::Host(g) = graph else { return Err(crate::backend::foreign("host", "a graph")) };
        let reads = reads.iter().map(|b| host_mem(b)).collect::<Result<Vec<_>>>()?;
        let writes = writes.iter().map(|b| host_mem(b)).collect::<Result<Vec<_>>>()?;
        g.launch(host_stream(stream)?, &reads, &writes)
    }

    fn launch_kernel(
        &self,
        device: DeviceId,
        kernel: &'static KernelSource,
        stream: &AnyStream,
        _grid: Grid,
        args: &[KernelArg<'_>],
    ) -> Result<()> {
        let s = host_stream(stream)?;
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
