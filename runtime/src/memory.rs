//! Memory statistics per device, as PyTorch's `torch.cuda.memory_*` give them.

use crate::backend;
use crate::device::DeviceId;
use crate::error::Result;

/// Bytes held by live tensors on `device`.
///
/// ```
/// use locus_runtime::{memory_allocated, Cuda, DeviceId, Tensor};
/// let before = memory_allocated(DeviceId::Cuda(0))?;
/// let t = Tensor::<Cuda<0>>::zeros([1024])?;
/// assert!(memory_allocated(DeviceId::Cuda(0))? >= before + 4096);
/// drop(t);
/// # Ok::<(), locus_runtime::Error>(())
/// ```
pub fn memory_allocated(device: DeviceId) -> Result<usize> {
    Ok(backend::for_device(device)?.memory(device)?.0)
}

/// The most bytes held on `device` since the process started or since
/// [`reset_peak_memory_stats`].
pub fn max_memory_allocated(device: DeviceId) -> Result<usize> {
    Ok(backend::for_device(device)?.memory(device)?.1)
}

/// Restarts [`max_memory_allocated`] of `device` from what is held now.
pub fn reset_peak_memory_stats(device: DeviceId) -> Result<()> {
    backend::for_device(device)?.reset_peak(device)
}
