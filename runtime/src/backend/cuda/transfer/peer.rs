//! Peer access between two CUDA devices: `cuDeviceCanAccessPeer`, then
//! `cuCtxEnablePeerAccess` both ways. Context peer access does not cover stream-ordered
//! memory (`cuMemAllocAsync`, which locus allocates from), so each device's default pool
//! also grants the other device access.

use cudarc::driver::{result, sys};

use crate::backend::cuda::driver::device::{driver, DeviceState};
use crate::backend::cuda::CudaBackend;
use crate::device_id::DeviceId;
use crate::error::{Error, Result};

/// Whether `device` can read and write the memory of `peer` directly (two distinct
/// devices: `parallel::peer` checks that).
pub(in crate::backend::cuda) fn can_access_peer(b: &CudaBackend, device: DeviceId, peer: DeviceId) -> Result<bool> {
    let (d, p) = (b.dev(device)?, b.dev(peer)?);
    let mut can = 0;
    // SAFETY: `can` is a live `i32` the driver writes during the call; both device
    // handles come from `cu_device` of live `DeviceState`s.
    unsafe { sys::cuDeviceCanAccessPeer(&mut can, d.ctx.cu_device(), p.ctx.cu_device()) }
        .result()
        .map_err(driver(d.ordinal, "cuDeviceCanAccessPeer"))?;
    Ok(can != 0)
}

/// Lets `device` and `peer` access each other's memory, contexts and pools alike.
pub(in crate::backend::cuda) fn enable_peer_access(b: &CudaBackend, device: DeviceId, peer: DeviceId) -> Result<()> {
    if !can_access_peer(b, device, peer)? || !can_access_peer(b, peer, device)? {
        return Err(Error::NoPeerAccess { lhs: device, rhs: peer });
    }
    let (d, p) = (b.dev(device)?, b.dev(peer)?);
    one_way(d, p)?;
    one_way(p, d)
}

/// Lets `from` access the memory of `to`.
fn one_way(from: &DeviceState, to: &DeviceState) -> Result<()> {
    from.bind()?;
    // SAFETY: `from`'s context is current (bind above) and `to`'s context is a live
    // primary context (devices live for the process); flags must be 0.
    match unsafe { sys::cuCtxEnablePeerAccess(to.ctx.cu_ctx(), 0) }.result() {
        Ok(()) => {}
        // Enabled before, by locus or by other code in the process: what was asked for.
        Err(e) if e.0 == sys::CUresult::CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED => {}
        Err(e) => return Err(driver(from.ordinal, "cuCtxEnablePeerAccess")(e)),
    }
    if !to.ctx.has_async_alloc() {
        return Ok(());
    }
    // SAFETY: `to.ctx.cu_device()` is a device handle from the driver for a live device;
    // its default pool lives as long as the device.
    let pool = unsafe { result::device::get_default_mem_pool(to.ctx.cu_device()) }
        .map_err(driver(to.ordinal, "cuDeviceGetDefaultMemPool"))?;
    let grant = sys::CUmemAccessDesc {
        location: sys::CUmemLocation {
            type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
            id: from.ctx.cu_device(),
        },
        flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
    };
    // SAFETY: `pool` is `to`'s default pool (above); `grant` is one valid descriptor on
    // this frame, read during the call, and the count is 1.
    unsafe { sys::cuMemPoolSetAccess(pool, &grant, 1) }.result().map_err(driver(to.ordinal, "cuMemPoolSetAccess"))
}
