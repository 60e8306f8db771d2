//! The host backend: N simulated CUDA devices in host memory.
//!
//! Each simulated device has its own memory account with a capacity
//! (`LOCUS_HOST_DEVICE_MEMORY` bytes, default 16 GiB), so an over-large allocation is
//! `Error::OutOfMemory` as on a GPU. `cpu` and `pinned` memory are ordinary host memory
//! on every backend, and run here.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use super::host_kernels as k;
use super::{Backend, BinaryOp, Buffer, ReduceOp, UnaryOp};
use crate::device::DeviceId;
use crate::element::{with_dtype, DType, Element, Scalar};
use crate::error::{Error, Result};
use crate::shape::{Layout, Reduction};

const DEFAULT_DEVICES: usize = 2;
const DEFAULT_DEVICE_MEMORY: usize = 16 << 30;

/// The bytes held on one device, with their high-water mark.
#[derive(Debug)]
pub(crate) struct MemoryAccount {
    device: DeviceId,
    capacity: usize,
    allocated: AtomicUsize,
    peak: AtomicUsize,
}

impl MemoryAccount {
    fn new(device: DeviceId, capacity: usize) -> Self {
        MemoryAccount { device, capacity, allocated: AtomicUsize::new(0), peak: AtomicUsize::new(0) }
    }

    fn reserve(&self, bytes: usize) -> Result<()> {
        let oom = |held: usize| Error::OutOfMemory {
            device: self.device,
            requested: bytes,
            free: self.capacity.saturating_sub(held),
        };
        let mut held = self.allocated.load(Ordering::Relaxed);
        loop {
            let next = held.checked_add(bytes).filter(|&n| n <= self.capacity).ok_or_else(|| oom(held))?;
            match self.allocated.compare_exchange_weak(held, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    self.peak.fetch_max(next, Ordering::Relaxed);
                    return Ok(());
                }
                Err(now) => held = now,
            }
        }
    }

    fn release(&self, bytes: usize) {
        self.allocated.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Bytes held now.
    pub fn allocated(&self) -> usize {
        self.allocated.load(Ordering::Relaxed)
    }

    /// The most bytes held since the last [`MemoryAccount::reset_peak`].
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// Starts the high-water mark again from what is held now.
    pub fn reset_peak(&self) {
        self.peak.store(self.allocated(), Ordering::Relaxed);
    }
}

/// Host memory of one device, 8-byte aligned so that any element type can view it.
#[derive(Debug)]
pub(crate) struct HostBuffer {
    words: Vec<u64>,
    len: usize,
    account: &'static MemoryAccount,
}

impl HostBuffer {
    fn alloc(account: &'static MemoryAccount, len: usize) -> Result<Self> {
        account.reserve(len)?;
        let nwords = len.div_ceil(8);
        let mut words = Vec::new();
        if words.try_reserve_exact(nwords).is_err() {
            account.release(len);
            return Err(Error::OutOfMemory { device: account.device, requested: len, free: 0 });
        }
        words.resize(nwords, 0);
        Ok(HostBuffer { words, len, account })
    }

    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.len]
    }

    pub fn as_slice<T: Element>(&self) -> &[T] {
        bytemuck::cast_slice(self.bytes())
    }

    pub fn as_mut_slice<T: Element>(&mut self) -> &mut [T] {
        bytemuck::cast_slice_mut(self.bytes_mut())
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        self.account.release(self.len);
    }
}

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
        let devices = env_number("LOCUS_HOST_DEVICES", DEFAULT_DEVICES);
        let memory = env_number("LOCUS_HOST_DEVICE_MEMORY", DEFAULT_DEVICE_MEMORY);
        let config_error = devices.as_ref().err().or(memory.as_ref().err()).cloned();
        let (devices, memory) = (devices.unwrap_or(0), memory.unwrap_or(0));
        let mut accounts =
            vec![MemoryAccount::new(DeviceId::Cpu, usize::MAX), MemoryAccount::new(DeviceId::Pinned, usize::MAX)];
        accounts.extend((0..devices).map(|n| MemoryAccount::new(DeviceId::Cuda(n as u32), memory)));
        HostBackend { accounts, config_error }
    }

    /// The memory account of `device`.
    pub fn account(&'static self, device: DeviceId) -> Result<&'static MemoryAccount> {
        let i = match device {
            DeviceId::Cpu => 0,
            DeviceId::Pinned => 1,
            DeviceId::Cuda(n) => 2 + n as usize,
        };
        self.accounts
            .get(i)
            .ok_or(Error::NoSuchDevice { ordinal: device.ordinal().unwrap_or(0), count: self.accounts.len() - 2 })
    }

    fn alloc(&'static self, device: DeviceId, bytes: usize) -> Result<HostBuffer> {
        HostBuffer::alloc(self.account(device)?, bytes)
    }

    fn alloc_elems(&'static self, device: DeviceId, dtype: DType, len: usize) -> Result<HostBuffer> {
        let bytes =
            len.checked_mul(dtype.size()).ok_or(Error::OutOfMemory { device, requested: usize::MAX, free: 0 })?;
        self.alloc(device, bytes)
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

fn host_buf(b: &Buffer) -> &HostBuffer {
    match b {
        Buffer::Host(h) => h,
    }
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

    fn make_current(&self, _device: DeviceId) -> Result<()> {
        Ok(())
    }

    fn upload(&self, device: DeviceId, data: &[u8]) -> Result<Buffer> {
        let mut out = host().alloc(device, data.len())?;
        out.bytes_mut().copy_from_slice(data);
        Ok(Buffer::Host(out))
    }

    fn download(&self, _device: DeviceId, buf: &Buffer, out: &mut [u8]) -> Result<()> {
        out.copy_from_slice(host_buf(buf).bytes());
        Ok(())
    }

    fn copy(&self, _src: DeviceId, buf: &Buffer, dst: DeviceId) -> Result<Buffer> {
        self.upload(dst, host_buf(buf).bytes())
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
            _ => Err(Error::InvalidArgument { op: "rand", reason: format!("{dtype} is not a float type") }),
        })
    }

    fn unary(&self, device: DeviceId, op: UnaryOp, dtype: DType, x: &Buffer, len: usize) -> Result<Buffer> {
        let x = host_buf(x);
        host().produce(device, dtype, len, |out| match (dtype, op) {
            (DType::F32, _) => {
                k::unary_float::<f32>(op, x.as_slice(), out.as_mut_slice());
                Ok(())
            }
            (DType::F64, _) => {
                k::unary_float::<f64>(op, x.as_slice(), out.as_mut_slice());
                Ok(())
            }
            (_, UnaryOp::Neg | UnaryOp::Relu) => {
                with_dtype!(dtype, T => k::unary::<T>(op, x.as_slice(), out.as_mut_slice()));
                Ok(())
            }
            _ => Err(Error::InvalidArgument { op: "unary", reason: format!("{op:?} needs a float type, not {dtype}") }),
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
        let (l, r) = (host_buf(lhs), host_buf(rhs));
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
        let l = host_buf(lhs);
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

    fn reduce(&self, device: DeviceId, op: ReduceOp, dtype: DType, x: &Buffer, r: Reduction) -> Result<Buffer> {
        let x = host_buf(x);
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
        let (a, b) = (host_buf(a), host_buf(b));
        host().produce(device, dtype, m * n, |out| {
            with_dtype!(dtype, T => k::matmul::<T>(a.as_slice(), b.as_slice(), out.as_mut_slice(), m, kk, n));
            Ok(())
        })
    }

    fn transpose(&self, device: DeviceId, dtype: DType, x: &Buffer, rows: usize, cols: usize) -> Result<Buffer> {
        let x = host_buf(x);
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
                let src = host_buf(buf).bytes();
                dst[at..at + src.len()].copy_from_slice(src);
                at += src.len();
            }
            Ok(())
        })
    }

    fn slice(&self, device: DeviceId, dtype: DType, x: &Buffer, offset: usize, len: usize) -> Result<Buffer> {
        let s = dtype.size();
        self.upload(device, &host_buf(x).bytes()[offset * s..(offset + len) * s])
    }
}
