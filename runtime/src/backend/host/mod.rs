//! The host backend: N simulated CUDA devices in host memory.
//!
//! Each simulated device has its own memory account with a capacity
//! (`LOCUS_HOST_DEVICE_MEMORY` bytes, default 16 GiB), so an over-large allocation is
//! `Error::OutOfMemory` as on a GPU. `cpu` and `pinned` memory are ordinary host memory
//! on every backend, and run here.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

mod buffer;
mod streams;

pub(crate) use buffer::HostBuffer;
pub(crate) use streams::HostEvent;
use streams::{
    host_buf, host_event, host_mem, on_host_stream, order_of, stream_id, stream_key, use_on_stream, NEXT_STREAM,
};

use crate::backend::account::MemoryAccount;
use crate::backend::host_kernels as k;
use crate::backend::{float_only, Backend, BinaryOp, Blocks, Buffer, ParamOp, RawEvent, RawStream, ReduceOp, UnaryOp};
use crate::device::DeviceId;
use crate::element::{with_dtype, DType, Element, Scalar};
use crate::error::{Error, Result};
use crate::shape::{Layout, Reduction};

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
        let config_error = devices.as_ref().err().or(memory.as_ref().err()).cloned();
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

    /// Host memory of `bytes` bytes on `device` (a host placement or a simulated device)
    /// whose contents are initialised but unspecified: pageable memory is zeroed, a reused
    /// pinned block keeps its old bytes. For a copy or kernel that writes every byte
    /// before the buffer is shared.
    pub(crate) fn alloc_for_overwrite(&'static self, device: DeviceId, bytes: usize) -> Result<HostBuffer> {
        HostBuffer::alloc(self.account(device)?, bytes)
    }

    fn alloc_elems(&'static self, device: DeviceId, dtype: DType, len: usize) -> Result<HostBuffer> {
        let bytes =
            len.checked_mul(dtype.size()).ok_or(Error::OutOfMemory { device, requested: usize::MAX, free: 0 })?;
        self.alloc_for_overwrite(device, bytes)
    }

    /// A new buffer of `len` elements filled by `f`.
    fn produce(
        &'static self,
        device: DeviceId,
        dtype: DType,
        len: usize,
        f: impl FnOnce(&mut HostBuffer) -> Result<()>,
    ) -> Result<Buffer> {
        let mut out = self.alloc_elems(device, dtype, len)?;
        f(&mut out)?;
        Ok(Buffer::Host(out))
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

impl Backend for HostBackend {
    fn name(&self) -> &'static str {
        "host"
    }

    fn device_count(&self) -> usize {
        self.accounts.len() - 2
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
        0
    }

    fn default_stream(&self, device: DeviceId) -> Result<RawStream> {
        host().account(device)?;
        Ok(RawStream::Host { device, id: 0 })
    }

    fn new_stream(&self, device: DeviceId) -> Result<RawStream> {
        host().account(device)?;
        Ok(RawStream::Host { device, id: NEXT_STREAM.fetch_add(1, Ordering::Relaxed) })
    }

    fn sync_stream(&self, _stream: &RawStream) -> Result<()> {
        Ok(())
    }

    fn sync_device(&self, device: DeviceId) -> Result<()> {
        host().account(device).map(|_| ())
    }

    fn new_event(&self, device: DeviceId, _timing: bool) -> Result<RawEvent> {
        host().account(device)?;
        Ok(RawEvent::Host(Arc::new(HostEvent::default())))
    }

    fn record_event(&self, event: &RawEvent, stream: &RawStream) -> Result<()> {
        let e = host_event(event)?;
        *e.at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        if let RawStream::Host { device, id } = *stream {
            e.mark.set(stream_key(device, id), order_of(device, id).writes());
        }
        Ok(())
    }

    fn wait_event(&self, stream: &RawStream, event: &RawEvent) -> Result<()> {
        let e = host_event(event)?;
        if let (RawStream::Host { device, id }, Some((writer, upto))) = (stream, e.mark.get()) {
            order_of(*device, *id).note_wait(writer, upto);
        }
        Ok(())
    }

    fn sync_event(&self, event: &RawEvent) -> Result<()> {
        host_event(event).map(|_| ())
    }

    fn event_done(&self, event: &RawEvent) -> Result<bool> {
        host_event(event).map(|_| true)
    }

    fn elapsed_ms(&self, start: &RawEvent, end: &RawEvent) -> Result<f32> {
        let read = |e| -> Result<Instant> {
            host_event(e)?.at.lock().unwrap_or_else(|p| p.into_inner()).ok_or_else(|| Error::InvalidArgument {
                op: "elapsed",
                reason: "both events must be recorded first".into(),
            })
        };
        let (a, b) = (read(start)?, read(end)?);
        Ok(match b.checked_duration_since(a) {
            Some(d) => d.as_secs_f32() * 1e3,
            None => -(a.duration_since(b).as_secs_f32() * 1e3),
        })
    }

    fn use_on(&self, buf: &Buffer, stream: &RawStream) -> Result<()> {
        if let RawStream::Host { id, .. } = stream {
            use_on_stream(host_mem(buf)?, *id);
        }
        Ok(())
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

    fn upload_async(&self, device: DeviceId, src: &HostBuffer, stream: &RawStream) -> Result<(Buffer, RawEvent)> {
        let buf = on_host_stream(stream, || self.upload(device, src.bytes()))?;
        let done = self.new_event(device, false)?;
        self.record_event(&done, stream)?;
        Ok((buf, done))
    }

    fn download_async(
        &self,
        device: DeviceId,
        src: &Buffer,
        dst: &mut HostBuffer,
        stream: &RawStream,
    ) -> Result<RawEvent> {
        let s = host_mem(src)?;
        use_on_stream(s, stream_id(stream));
        dst.bytes_mut().copy_from_slice(s.bytes());
        let done = self.new_event(device, false)?;
        self.record_event(&done, stream)?;
        Ok(done)
    }

    fn make_current(&self, _device: DeviceId) -> Result<()> {
        Ok(())
    }

    fn upload(&self, device: DeviceId, data: &[u8]) -> Result<Buffer> {
        let mut out = host().alloc_for_overwrite(device, data.len())?;
        out.bytes_mut().copy_from_slice(data);
        Ok(Buffer::Host(out))
    }

    fn download(&self, _device: DeviceId, buf: &Buffer, out: &mut [u8]) -> Result<()> {
        out.copy_from_slice(host_buf(buf)?.bytes());
        Ok(())
    }

    fn copy(&self, _src: DeviceId, buf: &Buffer, dst: DeviceId) -> Result<Buffer> {
        self.upload(dst, host_buf(buf)?.bytes())
    }

    fn fill(&self, device: DeviceId, dtype: DType, len: usize, value: Scalar) -> Result<Buffer> {
        host().produce(device, dtype, len, |out| {
            with_dtype!(dtype, T => out.as_mut_slice::<T>().fill(T::from_scalar(value)));
            Ok(())
        })
    }

    fn arange(&self, device: DeviceId, dtype: DType, len: usize, start: f64, step: f64) -> Result<Buffer> {
        host().produce(device, dtype, len, |out| {
            with_dtype!(dtype, T => k::arange(out.as_mut_slice::<T>(), start, step));
            Ok(())
        })
    }

    fn rand(&self, device: DeviceId, dtype: DType, len: usize, seed: u64) -> Result<Buffer> {
        host().produce(device, dtype, len, |out| match dtype {
            DType::F32 => {
                k::rand(out.as_mut_slice::<f32>(), seed);
                Ok(())
            }
            DType::F64 => {
                k::rand(out.as_mut_slice::<f64>(), seed);
                Ok(())
            }
            _ => float_only("rand", dtype),
        })
    }

    fn unary(&self, device: DeviceId, op: UnaryOp, dtype: DType, x: &Buffer, len: usize) -> Result<Buffer> {
        let x = host_buf(x)?;
        host().produce(device, dtype, len, |out| match (dtype, op) {
            (DType::F32, _) => {
                k::unary_float::<f32>(op, x.as_slice(), out.as_mut_slice());
                Ok(())
            }
            (DType::F64, _) => {
                k::unary_float::<f64>(op, x.as_slice(), out.as_mut_slice());
                Ok(())
            }
            (_, UnaryOp::Neg | UnaryOp::Relu | UnaryOp::Abs | UnaryOp::Square) => {
                with_dtype!(dtype, T => k::unary::<T>(op, x.as_slice(), out.as_mut_slice()));
                Ok(())
            }
            _ => float_only(op.name(), dtype),
        })
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
        let (l, r) = (host_buf(lhs)?, host_buf(rhs)?);
        let len = out_shape.iter().product();
        host().produce(device, dtype, len, |out| {
            with_dtype!(dtype, T => k::binary::<T>(op, l.as_slice(), r.as_slice(), out.as_mut_slice(), out_shape, layout))
        })
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
        let l = host_buf(lhs)?;
        host().produce(device, dtype, len, |out| {
            with_dtype!(dtype, T => k::binary::<T>(
                op,
                l.as_slice(),
                &[T::from_scalar(rhs)],
                out.as_mut_slice(),
                &[len],
                &Layout::RhsScalar,
            ))
        })
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
        let r = host_buf(rhs)?;
        host().produce(device, dtype, len, |out| {
            with_dtype!(dtype, T => k::binary::<T>(
                op,
                &[T::from_scalar(lhs)],
                r.as_slice(),
                out.as_mut_slice(),
                &[len],
                &Layout::LhsScalar,
            ))
        })
    }

    fn unary_param(&self, device: DeviceId, op: ParamOp, dtype: DType, x: &Buffer, len: usize) -> Result<Buffer> {
        let x = host_buf(x)?;
        host().produce(device, dtype, len, |out| match (op, dtype) {
            (ParamOp::Pow(e), DType::F32) => {
                k::pow::<f32>(x.as_slice(), f32::from_scalar(e), out.as_mut_slice());
                Ok(())
            }
            (ParamOp::Pow(e), DType::F64) => {
                k::pow::<f64>(x.as_slice(), f64::from_scalar(e), out.as_mut_slice());
                Ok(())
            }
            (ParamOp::Pow(_), _) => {
                Err(Error::InvalidArgument { op: "pow", reason: format!("needs a float type, not {dtype}") })
            }
            (ParamOp::Clamp(lo, hi), _) => {
                with_dtype!(dtype, T => k::clamp::<T>(
                    x.as_slice(),
                    T::from_scalar(lo),
                    T::from_scalar(hi),
                    out.as_mut_slice(),
                ));
                Ok(())
            }
        })
    }

    fn reduce(&self, device: DeviceId, op: ReduceOp, dtype: DType, x: &Buffer, r: Reduction) -> Result<Buffer> {
        if op == ReduceOp::Mean {
            float_only("mean", dtype)?;
        }
        let x = host_buf(x)?;
        host().produce(device, dtype, r.out_len(), |out| {
            with_dtype!(dtype, T => k::reduce::<T>(op, x.as_slice(), out.as_mut_slice(), r));
            Ok(())
        })
    }

    fn matmul(
        &self,
        device: DeviceId,
        dtype: DType,
        a: &Buffer,
        b: &Buffer,
        m: usize,
        kk: usize,
        n: usize,
    ) -> Result<Buffer> {
        let (a, b) = (host_buf(a)?, host_buf(b)?);
        host().produce(device, dtype, m * n, |out| {
            with_dtype!(dtype, T => k::matmul::<T>(a.as_slice(), b.as_slice(), out.as_mut_slice(), m, kk, n));
            Ok(())
        })
    }

    fn transpose(&self, device: DeviceId, dtype: DType, x: &Buffer, rows: usize, cols: usize) -> Result<Buffer> {
        let x = host_buf(x)?;
        host().produce(device, dtype, rows * cols, |out| {
            with_dtype!(dtype, T => k::transpose::<T>(x.as_slice(), out.as_mut_slice(), rows, cols));
            Ok(())
        })
    }

    fn concat(&self, device: DeviceId, dtype: DType, parts: &[(&Buffer, usize)]) -> Result<Buffer> {
        let len = parts.iter().map(|p| p.1).sum();
        host().produce(device, dtype, len, |out| {
            let mut at = 0;
            let dst = out.bytes_mut();
            for (buf, _) in parts {
                let src = host_buf(buf)?.bytes();
                dst[at..at + src.len()].copy_from_slice(src);
                at += src.len();
            }
            Ok(())
        })
    }

    fn slice(&self, device: DeviceId, dtype: DType, x: &Buffer, offset: usize, len: usize) -> Result<Buffer> {
        let s = dtype.size();
        self.upload(device, &host_buf(x)?.bytes()[offset * s..(offset + len) * s])
    }

    fn copy_blocks(&self, device: DeviceId, dtype: DType, len: usize, parts: &[Blocks<'_>]) -> Result<Buffer> {
        host().produce(device, dtype, len, |out| {
            let dst = out.bytes_mut();
            for b in parts {
                k::copy_blocks(dst, host_buf(b.src)?.bytes(), dtype.size(), b);
            }
            Ok(())
        })
    }

    // Multi-device work: see host_collective.rs.

    fn can_access_peer(&self, device: DeviceId, peer: DeviceId) -> Result<bool> {
        super::host_collective::can_access_peer(device, peer)
    }

    fn enable_peer_access(&self, device: DeviceId, peer: DeviceId) -> Result<()> {
        super::host_collective::enable_peer_access(device, peer)
    }

    fn collective(
        &self,
        devices: &[DeviceId],
        dtype: DType,
        len: usize,
        op: super::Collective<'_>,
    ) -> Result<Option<Vec<Buffer>>> {
        super::host_collective::collective(devices, dtype, len, op)
    }
}
