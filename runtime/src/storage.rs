//! A tensor's memory: one backend buffer with its device, type and length.

use crate::backend::{self, Backend, Buffer};
use crate::device::DeviceId;
use crate::element::DType;
use crate::error::Result;

/// Immutable once made; tensors share it through an `Arc`.
#[derive(Debug)]
pub(crate) struct Storage {
    pub buf: Buffer,
    pub device: DeviceId,
    pub dtype: DType,
    /// Elements.
    pub len: usize,
}

impl Storage {
    pub fn new(buf: Buffer, device: DeviceId, dtype: DType, len: usize) -> Self {
        Storage { buf, device, dtype, len }
    }

    pub fn bytes(&self) -> usize {
        self.len * self.dtype.size()
    }

    /// The backend that owns this storage.
    pub fn backend(&self) -> Result<&'static dyn Backend> {
        backend::for_device(self.device)
    }

    /// A copy of the contents as host bytes.
    pub fn read_bytes(&self) -> Result<Vec<u8>> {
        let mut out = vec![0u8; self.bytes()];
        self.backend()?.download(self.device, &self.buf, &mut out)?;
        Ok(out)
    }

    /// A copy of this storage on `dst`: within one backend its own copy, across
    /// backends through host memory.
    pub fn copy_to(&self, dst: DeviceId) -> Result<Storage> {
        let (from, to) = (self.backend()?, backend::for_device(dst)?);
        let buf = if backend::same(from, to) {
            from.copy(self.device, &self.buf, dst)?
        } else {
            to.upload(dst, &self.read_bytes()?)?
        };
        Ok(Storage::new(buf, dst, self.dtype, self.len))
    }
}
