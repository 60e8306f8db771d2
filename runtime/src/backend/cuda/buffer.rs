//! Device memory: stream-ordered allocations from the device's pool.

use cudarc::driver::{result, sys};

use super::device::{driver, DeviceState};
use crate::error::{Error, Result};

/// `bytes` bytes on one device, freed (stream-ordered) on drop.
pub(crate) struct CudaBuffer {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    dev: &'static DeviceState,
}

impl std::fmt::Debug for CudaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaBuffer({} bytes on cuda:{})", self.bytes, self.dev.ordinal)
    }
}

impl CudaBuffer {
    /// Uninitialised memory, ordered on the device's stream. Zero bytes allocate nothing.
    pub fn alloc(dev: &'static DeviceState, bytes: usize) -> Result<Self> {
        if bytes == 0 {
            return Ok(CudaBuffer { ptr: 0, bytes, dev });
        }
        dev.bind()?;
        let ptr = match unsafe { result::malloc_async(dev.stream.0, bytes) } {
            Ok(p) => p,
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                let free = result::mem_get_info().map(|(free, _)| free).unwrap_or(0);
                return Err(Error::OutOfMemory { device: dev.id(), requested: bytes, free });
            }
            Err(e) => return Err(driver(dev.ordinal, "cuMemAllocAsync")(e)),
        };
        // The account has no capacity of its own here: the driver says when memory ends.
        dev.account.reserve(bytes)?;
        Ok(CudaBuffer { ptr, bytes, dev })
    }

    pub fn ptr(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn device(&self) -> &'static DeviceState {
        self.dev
    }
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        if self.ptr == 0 {
            return;
        }
        // Freed in stream order: work already queued that reads this memory finishes first.
        if self.dev.bind().is_ok() {
            let _ = unsafe { result::free_async(self.ptr, self.dev.stream.0) };
        }
        self.dev.account.release(self.bytes);
    }
}
