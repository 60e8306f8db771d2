//! Device memory: stream-ordered allocations from the device's pool.

use std::sync::{Arc, Mutex};

use cudarc::driver::{result, sys};

use super::device::{driver, DeviceState};
use super::stream::StreamObj;
use crate::error::{Error, Result};

/// `bytes` bytes on one device, written on `stream` and freed there (stream-ordered)
/// on drop, after every other stream that read it.
pub(crate) struct CudaBuffer {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    dev: &'static DeviceState,
    stream: Arc<StreamObj>,
    /// Other streams that used this memory; the free waits for them.
    readers: Mutex<Vec<Arc<StreamObj>>>,
}

impl std::fmt::Debug for CudaBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CudaBuffer({} bytes on cuda:{})", self.bytes, self.dev.ordinal)
    }
}

impl CudaBuffer {
    /// Uninitialised memory, ordered on `stream`. Zero bytes allocate nothing.
    pub fn alloc(dev: &'static DeviceState, stream: &Arc<StreamObj>, bytes: usize) -> Result<Self> {
        let new = |ptr| CudaBuffer { ptr, bytes, dev, stream: Arc::clone(stream), readers: Mutex::new(Vec::new()) };
        if bytes == 0 {
            return Ok(new(0));
        }
        dev.bind()?;
        let ptr = match unsafe { result::malloc_async(stream.raw.0, bytes) } {
            Ok(p) => p,
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                let free = result::mem_get_info().map(|(free, _)| free).unwrap_or(0);
                return Err(Error::OutOfMemory { device: dev.id(), requested: bytes, free });
            }
            Err(e) => return Err(driver(dev.ordinal, "cuMemAllocAsync")(e)),
        };
        // The account has no capacity of its own here: the driver says when memory ends.
        dev.account.reserve(bytes)?;
        Ok(new(ptr))
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

    /// The stream that wrote this memory.
    pub fn stream(&self) -> &Arc<StreamObj> {
        &self.stream
    }

    /// Prepares this memory to be read on `on`: a stream other than its writer first
    /// waits for the writer (an event, no host wait), and the eventual free waits for
    /// `on`. On the writer's own stream this costs nothing.
    pub fn use_on(&self, on: &Arc<StreamObj>) -> Result<()> {
        if Arc::ptr_eq(&self.stream, on) || self.ptr == 0 {
            return Ok(());
        }
        on.wait_for(&self.stream)?;
        crate::backend::count_cross_stream_wait();
        let mut readers = self.readers.lock().unwrap_or_else(|p| p.into_inner());
        if !readers.iter().any(|r| Arc::ptr_eq(r, on)) {
            readers.push(Arc::clone(on));
        }
        Ok(())
    }
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        if self.ptr == 0 {
            return;
        }
        if self.dev.bind().is_ok() {
            let readers = std::mem::take(self.readers.get_mut().unwrap_or_else(|p| p.into_inner()));
            for r in &readers {
                let _ = self.stream.wait_for(r);
            }
            let _ = unsafe { result::free_async(self.ptr, self.stream.raw.0) };
        }
        self.dev.account.release(self.bytes);
    }
}
