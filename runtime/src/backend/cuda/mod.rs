//! The cuda backend: cudarc 0.19 driver calls, NVRTC-compiled kernels from
//! `locus-kernels`, cuBLAS for float matmul. Loaded dynamically: a machine without
//! CUDA builds and runs locus on the host backend instead.
//!
//! This file holds the table of devices (opened on first use) and implements [`Backend`]
//! by delegating, one module per concern:
//! - `device`: probing the driver, a device's context and kernel cache, raw handles;
//! - `launch`: typed kernel arguments, grid geometry, the one kernel launch;
//! - `buffer`: device memory (caching bins, readers, stream-ordered frees);
//! - `memory`: an op's output on the current stream, write marks, device copies, pinned
//!   host blocks;
//! - `stream` and `event`: streams (with their block caches and cuBLAS handles), events;
//! - `init`, `elementwise`, `reduce`, `matrix`: the compute ops, one kernel source each;
//! - `transfer` and `staged`: copies between host and device and between devices;
//! - `peer` and `nccl`: several devices.

mod buffer;
mod device;
mod elementwise;
mod event;
mod init;
mod launch;
mod matrix;
mod memory;
mod nccl;
mod peer;
mod reduce;
mod staged;
mod stream;
mod transfer;

use std::sync::{Arc, OnceLock};

use cudarc::driver::result;

pub(crate) use buffer::CudaBuffer;
use device::{driver, DeviceState};
pub(crate) use event::EventObj;
use memory::cuda;
pub(crate) use stream::StreamObj;

use super::{
    Backend, BinaryOp, Blocks, Buffer, Collective, HostBuffer, ParamOp, RawEvent, RawStream, ReduceOp, UnaryOp,
};
use crate::device_id::DeviceId;
use crate::element::{DType, Scalar};
use crate::error::{Error, Result};
use crate::shape::{Layout, Reduction};

pub(crate) struct CudaBackend {
    devices: Vec<OnceLock<Result<&'static DeviceState>>>,
}

/// The cuda backend, if this machine can run it; else why not, as a sentence.
pub(crate) fn open() -> std::result::Result<CudaBackend, String> {
    let count = device::probe()?;
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

    fn raw_stream(&self, stream: &RawStream) -> Result<Arc<StreamObj>> {
        match stream {
            RawStream::Cuda(s) => Ok(Arc::clone(s)),
            RawStream::Host(_) => Err(foreign("stream")),
        }
    }

    fn raw_event<'e>(&self, ev: &'e RawEvent) -> Result<&'e EventObj> {
        match ev {
            RawEvent::Cuda(e) => Ok(e),
            _ => Err(foreign("event")),
        }
    }
}

fn foreign(what: &str) -> Error {
    Error::InvalidArgument { op: "stream", reason: format!("a host-backend {what} was handed to the cuda backend") }
}

impl Backend for CudaBackend {
    fn name(&self) -> &'static str {
        "cuda"
    }

    fn device_count(&self) -> usize {
        self.devices.len()
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
        Ok(stream::cached_bytes(self.dev(device)?.ordinal))
    }

    fn live_streams(&self) -> usize {
        stream::live_streams()
    }

    fn make_current(&self, device: DeviceId) -> Result<()> {
        self.dev(device)?.bind()
    }

    fn default_stream(&self, device: DeviceId) -> Result<RawStream> {
        Ok(RawStream::Cuda(Arc::clone(&self.dev(device)?.stream)))
    }

    fn new_stream(&self, device: DeviceId) -> Result<RawStream> {
        let dev = self.dev(device)?;
        dev.bind()?;
        Ok(RawStream::Cuda(Arc::new(StreamObj::create(dev.ordinal, dev.ctx.cu_ctx())?)))
    }

    fn sync_stream(&self, stream: &RawStream) -> Result<()> {
        let s = self.raw_stream(stream)?;
        self.dev(DeviceId::Cuda(s.ordinal))?.bind()?;
        s.synchronize()
    }

    fn sync_device(&self, device: DeviceId) -> Result<()> {
        let dev = self.dev(device)?;
        dev.bind()?;
        result::ctx::synchronize().map_err(driver(dev.ordinal, "cuCtxSynchronize"))
    }

    fn new_event(&self, device: DeviceId, timing: bool) -> Result<RawEvent> {
        let dev = self.dev(device)?;
        Ok(RawEvent::Cuda(Arc::new(EventObj::create(dev.ordinal, dev.ctx.cu_ctx(), timing)?)))
    }

    fn record_event(&self, event: &RawEvent, stream: &RawStream) -> Result<()> {
        let (e, s) = (self.raw_event(event)?, self.raw_stream(stream)?);
        self.dev(DeviceId::Cuda(s.ordinal))?.bind()?;
        e.record(&s)
    }

    fn wait_event(&self, stream: &RawStream, event: &RawEvent) -> Result<()> {
        let (e, s) = (self.raw_event(event)?, self.raw_stream(stream)?);
        self.dev(DeviceId::Cuda(s.ordinal))?.bind()?;
        s.wait(e)
    }

    fn sync_event(&self, event: &RawEvent) -> Result<()> {
        let e = self.raw_event(event)?;
        self.dev(DeviceId::Cuda(e.ordinal))?.bind()?;
        e.synchronize()
    }

    fn event_done(&self, event: &RawEvent) -> Result<bool> {
        let e = self.raw_event(event)?;
        self.dev(DeviceId::Cuda(e.ordinal))?.bind()?;
        e.is_complete()
    }

    fn elapsed_ms(&self, start: &RawEvent, end: &RawEvent) -> Result<f32> {
        let (a, b) = (self.raw_event(start)?, self.raw_event(end)?);
        self.dev(DeviceId::Cuda(a.ordinal))?.bind()?;
        a.elapsed_ms(b)
    }

    fn use_on(&self, buf: &Buffer, stream: &RawStream) -> Result<()> {
        let s = self.raw_stream(stream)?;
        cuda(buf)?.device().bind()?;
        cuda(buf)?.use_on(&s)
    }

    fn alloc_pinned(&self, bytes: usize) -> Result<usize> {
        self.alloc_pinned_block(bytes)
    }

    unsafe fn free_pinned(&self, ptr: usize, _bytes: usize) {
        // SAFETY: the trait's contract: `ptr` comes from `alloc_pinned`, that is from
        // `alloc_pinned_block`, and nothing uses the memory any more.
        unsafe { self.free_pinned_block(ptr) }
    }

    fn upload_async(&self, device: DeviceId, src: &HostBuffer, stream: &RawStream) -> Result<(Buffer, RawEvent)> {
        transfer::upload_async(self, device, src, stream)
    }

    fn download_async(
        &self,
        device: DeviceId,
        src: &Buffer,
        dst: &mut HostBuffer,
        stream: &RawStream,
    ) -> Result<RawEvent> {
        transfer::download_async(self, device, src, dst, stream)
    }

    fn upload(&self, device: DeviceId, data: &[u8]) -> Result<Buffer> {
        transfer::upload(self, device, data)
    }

    fn download(&self, _device: DeviceId, buf: &Buffer, out: &mut [u8]) -> Result<()> {
        transfer::download(self, buf, out)
    }

    fn copy(&self, _src: DeviceId, buf: &Buffer, dst: DeviceId) -> Result<Buffer> {
        transfer::copy(self, buf, dst)
    }

    fn fill(&self, device: DeviceId, dtype: DType, len: usize, value: Scalar) -> Result<Buffer> {
        init::fill(self, device, dtype, len, value)
    }

    fn arange(&self, device: DeviceId, dtype: DType, len: usize, start: f64, step: f64) -> Result<Buffer> {
        init::arange(self, device, dtype, len, start, step)
    }

    fn rand(&self, device: DeviceId, dtype: DType, len: usize, seed: u64) -> Result<Buffer> {
        init::rand(self, device, dtype, len, seed)
    }

    fn unary(&self, device: DeviceId, op: UnaryOp, dtype: DType, x: &Buffer, len: usize) -> Result<Buffer> {
        elementwise::unary(self, device, op, dtype, x, len)
    }

    fn binary(
        &self,
        device: DeviceId,
        op: BinaryOp,
        dtype: DType,
        lhs: &Buffer,
        rhs: &Buffer,
        out_shape: &[usize],
        layout: &Layout,
    ) -> Result<Buffer> {
        elementwise::binary(self, device, op, dtype, lhs, rhs, out_shape, layout)
    }

    fn binary_scalar(
        &self,
        device: DeviceId,
        op: BinaryOp,
        dtype: DType,
        lhs: &Buffer,
        len: usize,
        rhs: Scalar,
    ) -> Result<Buffer> {
        elementwise::binary_scalar(self, device, op, dtype, lhs, len, rhs)
    }

    fn scalar_binary(
        &self,
        device: DeviceId,
        op: BinaryOp,
        dtype: DType,
        lhs: Scalar,
        rhs: &Buffer,
        len: usize,
    ) -> Result<Buffer> {
        elementwise::scalar_binary(self, device, op, dtype, lhs, rhs, len)
    }

    fn unary_param(&self, device: DeviceId, op: ParamOp, dtype: DType, x: &Buffer, len: usize) -> Result<Buffer> {
        elementwise::unary_param(self, device, op, dtype, x, len)
    }

    fn reduce(&self, device: DeviceId, op: ReduceOp, dtype: DType, x: &Buffer, r: Reduction) -> Result<Buffer> {
        reduce::reduce(self, device, op, dtype, x, r)
    }

    fn matmul(
        &self,
        device: DeviceId,
        dtype: DType,
        a: &Buffer,
        b: &Buffer,
        m: usize,
        k: usize,
        n: usize,
    ) -> Result<Buffer> {
        matrix::matmul(self, device, dtype, a, b, m, k, n)
    }

    fn transpose(&self, device: DeviceId, dtype: DType, x: &Buffer, rows: usize, cols: usize) -> Result<Buffer> {
        matrix::transpose(self, device, dtype, x, rows, cols)
    }

    fn concat(&self, device: DeviceId, dtype: DType, parts: &[(&Buffer, usize)]) -> Result<Buffer> {
        matrix::concat(self, device, dtype, parts)
    }

    fn slice(&self, device: DeviceId, dtype: DType, x: &Buffer, offset: usize, len: usize) -> Result<Buffer> {
        matrix::slice(self, device, dtype, x, offset, len)
    }

    fn copy_blocks(&self, device: DeviceId, dtype: DType, len: usize, parts: &[Blocks<'_>]) -> Result<Buffer> {
        matrix::copy_blocks(self, device, dtype, len, parts)
    }

    fn can_access_peer(&self, device: DeviceId, peer: DeviceId) -> Result<bool> {
        peer::can_access_peer(self, device, peer)
    }

    fn enable_peer_access(&self, device: DeviceId, peer: DeviceId) -> Result<()> {
        peer::enable_peer_access(self, device, peer)
    }

    fn collective(
        &self,
        devices: &[DeviceId],
        dtype: DType,
        len: usize,
        op: Collective<'_>,
    ) -> Result<Option<Vec<Buffer>>> {
        nccl::collective(self, devices, dtype, len, op)
    }
}
