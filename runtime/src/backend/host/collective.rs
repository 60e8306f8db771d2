//! Peer access and collectives of the host backend. Simulated devices all live in host
//! memory, so every pair of distinct devices can reach each other, and a collective is
//! a few copies and sums: the same results NCCL gives, in the same device order. The
//! inputs are read once their writers' streams are done (a host wait, stronger than the
//! event waits NCCL makes); the outputs are new memory of each device's current stream.

use crate::backend::host::host;
use crate::backend::host::HostBuffer;
use crate::backend::{Collective, CommReduce};
use crate::device_id::DeviceId;
use crate::element::{with_dtype, DType, Element};
use crate::error::{Error, Result};

/// Whether `device` can reach `peer` (two distinct devices: `parallel::peer` checks
/// that): simulated devices share host memory, so any two existing ones can.
pub(crate) fn can_access_peer(device: DeviceId, peer: DeviceId) -> Result<bool> {
    host().account(device)?;
    host().account(peer)?;
    Ok(true)
}

/// Peer access needs no set-up on the host; the devices must exist.
pub(crate) fn enable_peer_access(device: DeviceId, peer: DeviceId) -> Result<()> {
    can_access_peer(device, peer).map(drop)
}

/// `op` over `devices`, computed in host memory; always `Some`.
pub(crate) fn collective(
    devices: &[DeviceId],
    dtype: DType,
    len: usize,
    op: Collective<'_, HostBuffer>,
) -> Result<Option<Vec<HostBuffer>>> {
    let bytes = len.checked_mul(dtype.size()).ok_or_else(|| bad("the inputs are larger than memory"))?;
    let result = match op {
        Collective::Broadcast { root, buf } => {
            if root >= devices.len() {
                return Err(bad("the root is not one of the devices"));
            }
            host().read_now(sized(buf, bytes)?)?.to_vec()
        }
        Collective::AllReduceSum(inputs) => {
            let inputs = inputs_of(devices, inputs, bytes)?;
            with_dtype!(dtype, T => sum::<T>(&inputs))
        }
        Collective::AllGather(inputs) => inputs_of(devices, inputs, bytes)?.concat(),
    };
    let outputs = devices
        .iter()
        .map(|&d| {
            let mut out = host().alloc_for_overwrite(d, result.len())?;
            out.bytes_mut().copy_from_slice(&result);
            out.mark_written();
            Ok(out)
        })
        .collect::<Result<_>>()?;
    Ok(Some(outputs))
}

/// The elementwise sum of the inputs, added in device order (as `dist` adds ranks), as
/// bytes.
fn sum<T: Element>(inputs: &[&[u8]]) -> Vec<u8> {
    let parts: Vec<&[T]> = inputs.iter().map(|b| bytemuck::cast_slice::<u8, T>(b)).collect();
    bytemuck::cast_slice(&CommReduce::Sum.reduce_in_order(&parts)).to_vec()
}

/// The inputs' bytes, read once their writers are done.
fn inputs_of<'a>(devices: &[DeviceId], inputs: &[&'a HostBuffer], bytes: usize) -> Result<Vec<&'a [u8]>> {
    if inputs.len() != devices.len() || inputs.is_empty() {
        return Err(bad("one input per device is needed"));
    }
    inputs.iter().map(|b| host().read_now(sized(b, bytes)?)).collect()
}

fn sized(b: &HostBuffer, bytes: usize) -> Result<&HostBuffer> {
    match b.len() == bytes {
        true => Ok(b),
        false => Err(bad("an input has the wrong length")),
    }
}

fn bad(reason: &str) -> Error {
    Error::InvalidArgument { op: "collective", reason: reason.into() }
}
