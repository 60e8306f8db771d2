//! [`AnyBackend`]'s calls that make memory: pinned blocks, uploads (holding a pinned
//! source until its copy's event), wrapped outside memory, copies, fills.

use crate::backend::dispatch::backend::{mismatch, not_capturable, AnyBackend, Imp, HOST_COPY};
use crate::backend::dispatch::capture::on_device;
use crate::backend::dispatch::current;
use crate::backend::{AnyEvent, AnyStream, BackendDevice, Buffer, Dist, HostBuffer, Release};
use crate::device_id::DeviceId;
use crate::element::{DType, Scalar};
use crate::error::Result;

impl AnyBackend {
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
            Imp::Host(b) => b.upload(device, data).map(Buffer::host),
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
                b.upload_async(device, src, s).map(|(buf, e)| (Buffer::host(buf), AnyEvent::Host(e)))?
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
            (Imp::Host(b), AnyStream::Host(s)) => unsafe { b.wrap(device, addr, bytes, s, release) }.map(Buffer::host),
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
            Imp::Host(b) => Ok(b.upload_parts(device, parts)?.into_iter().map(Buffer::host).collect()),
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
            (Imp::Host(b), Buffer::Host(s)) => b.copy(s, device).map(Buffer::host),
            (Imp::Cuda(b), Buffer::Cuda(s)) => b.copy(s, device).map(Buffer::Cuda),
            _ => Err(mismatch("memory")),
        }
    }

    pub(crate) fn fill(&self, device: DeviceId, dtype: DType, len: usize, value: Scalar) -> Result<Buffer> {
        self.gate_device("full", device)?;
        match self.imp {
            Imp::Host(b) => b.fill(device, dtype, len, value).map(Buffer::host),
            Imp::Cuda(b) => b.fill(device, dtype, len, value).map(Buffer::Cuda),
        }
    }

    pub(crate) fn arange(&self, device: DeviceId, dtype: DType, len: usize, start: f64, step: f64) -> Result<Buffer> {
        self.gate_device("arange", device)?;
        match self.imp {
            Imp::Host(b) => b.arange(device, dtype, len, start, step).map(Buffer::host),
            Imp::Cuda(b) => b.arange(device, dtype, len, start, step).map(Buffer::Cuda),
        }
    }

    pub(crate) fn rand(&self, device: DeviceId, dtype: DType, len: usize, seed: u64, dist: Dist) -> Result<Buffer> {
        self.gate_device(dist.name(), device)?;
        match self.imp {
            Imp::Host(b) => b.rand(device, dtype, len, seed, dist).map(Buffer::host),
            Imp::Cuda(b) => b.rand(device, dtype, len, seed, dist).map(Buffer::Cuda),
        }
    }
}
