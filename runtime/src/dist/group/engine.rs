//! A group's device path: the ranks agree through the store whether every one of them has
//! a communicator (NCCL on the cuda backend), rank 0 makes its id and shares it, and each
//! rank joins; collectives on the group's device then run there.

use std::time::Duration;

use super::{dist, ProcessGroup};
use crate::backend::{self, AnyComm, CommOp};
use crate::device::{Device, DeviceId};
use crate::dist::Store;
use crate::element::Element;
use crate::error::Result;
use crate::tensor::Tensor;

/// How the collectives of a group's device tensors move.
pub(super) enum Engine {
    /// Through host memory, over TCP (the host backend; no NCCL on some rank).
    Tcp,
    /// On the backend's communicator.
    Comm(AnyComm),
}

impl Engine {
    pub(super) fn name(&self) -> &'static str {
        match self {
            Engine::Tcp => "tcp",
            Engine::Comm(_) => "nccl",
        }
    }
}

/// Decides, with every other rank, how `device`'s collectives move, and joins the
/// communicator when they all have one. Every rank calls it once per group; a rank with
/// no device (`None`) takes part, and makes every rank use TCP.
pub(super) fn engine(
    store: &dyn Store,
    rank: usize,
    world: usize,
    device: Option<DeviceId>,
    timeout: Duration,
) -> Result<Engine> {
    const OP: &str = "with_device";
    let b = match device {
        Some(d) => Some(backend::for_device(d)?),
        None => None,
    };
    let has = match (b, device) {
        (Some(b), Some(d)) => b.has_process_comm(d),
        _ => false,
    };
    store.set(&format!("comm/has/{rank}"), &[u8::from(has)])?;
    let mut all = true;
    for r in 0..world {
        all &= store.get(&format!("comm/has/{r}"))? == [1];
    }
    let (Some(b), Some(device), true) = (b, device, all) else { return Ok(Engine::Tcp) };
    if rank == 0 {
        store.set("comm/id", &b.new_comm_id()?)?;
    }
    let id = store.get("comm/id")?;
    b.join_comm(device, &id, rank, world, timeout)
        .map(Engine::Comm)
        .map_err(|e| dist(OP, format!("rank {rank} of {world} could not join the NCCL communicator on {device}: {e}")))
}

impl ProcessGroup {
    /// Queues `op` (on `t`'s elements) on the communicator, on the current stream.
    pub(super) fn comm_run<D: Device, T: Element>(
        &self,
        c: &AnyComm,
        t: &Tensor<D, T>,
        op: CommOp<'_, crate::backend::Buffer>,
    ) -> Result<crate::backend::Buffer> {
        let out = backend::for_device(t.device())?.run_comm(c, T::DTYPE, t.numel(), op)?;
        out.ok_or_else(|| dist("collective", "the communicator gave no result"))
    }
}
