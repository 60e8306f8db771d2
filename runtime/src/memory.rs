//! Memory statistics per device, as PyTorch's `torch.cuda.memory_*` give them.

use crate::backend;
use crate::device::DeviceId;
use crate::error::Result;

/// Bytes held by live tensors on `device`: the sum of their sizes as asked for, without
/// any allocator's rounding, on every backend (PyTorch's `memory_allocated` counts
/// rounded blocks instead). Freed memory that locus keeps for reuse is in
/// [`memory_reserved`], not here.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{memory_allocated, Cuda, DeviceId, Tensor};
/// let before = memory_allocated(DeviceId::Cuda(0))?;
/// let t = Tensor::<Cuda<0>>::zeros([1024])?;
/// assert!(memory_allocated(DeviceId::Cuda(0))? >= before + 4096);
/// drop(t);
/// # Ok::<(), locus::Error>(())
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

/// Bytes locus holds on `device`: [`memory_allocated`] plus freed blocks cached for
/// reuse (PyTorch's `memory_reserved`). A stream's cached blocks go back to the driver
/// when the stream is dropped, so dropping streams keeps this flat.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{memory_allocated, memory_reserved, DeviceId};
/// let d = DeviceId::Cuda(0);
/// assert!(memory_reserved(d)? >= memory_allocated(d)?);
/// # Ok::<(), locus::Error>(())
/// ```
pub fn memory_reserved(device: DeviceId) -> Result<usize> {
    let b = backend::for_device(device)?;
    Ok(b.memory(device)?.0 + b.cached_bytes(device)?)
}

/// How many CUDA streams locus holds now, over all devices: the devices' own, the
/// user's [`Stream`](crate::Stream)s, and those kept alive by memory still ordered on
/// them. On the host backend, its simulated streams: each device's default stream once
/// the device is used, and the user's.
///
/// ```
/// # extern crate locus_runtime as locus;
/// let before = locus::stream_count()?;
/// drop(locus::Stream::<locus::Cuda<0>>::new()?);
/// assert_eq!(locus::stream_count()?, before);
/// # Ok::<(), locus::Error>(())
/// ```
pub fn stream_count() -> Result<usize> {
    Ok(backend::selected()?.live_streams())
}
