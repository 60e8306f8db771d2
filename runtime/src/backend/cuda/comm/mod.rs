//! Communicators between processes (`dist`'s `ProcessGroup` on the cuda backend): one
//! NCCL rank per process, joined with `ncclCommInitRank` from a unique id the ranks
//! share through their store. Collectives are queued on the thread's current stream of
//! the communicator's device and follow the same ordering rules as every op: inputs are
//! waited for there, the result is written there.

pub(in crate::backend::cuda) mod local;
pub(in crate::backend::cuda) mod watchdog;

use std::ffi::c_void;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cudarc::nccl::{result as nccl, sys as nsys};

use crate::backend::cuda::comm::local::{nccl_type, present};
use crate::backend::cuda::comm::watchdog::Watch;
use crate::backend::cuda::driver::buffer::CudaBuffer;
use crate::backend::cuda::driver::device::{DeviceState, Handle};
use crate::backend::cuda::driver::memory::{alloc, done};
use crate::backend::cuda::driver::timing;
use crate::backend::cuda::CudaBackend;
use crate::backend::{BackendDevice, CommOp, CommReduce};
use crate::device_id::DeviceId;
use crate::element::DType;
use crate::error::{Error, Result};
use crate::faults::Point;

/// This process's rank of an NCCL communicator on one device.
pub(crate) struct ProcessComm {
    /// The lock keeps two threads from enqueueing on the communicator at once, which NCCL
    /// does not allow. Null once the watchdog aborted it.
    pub(in crate::backend::cuda) comm: Mutex<Handle<nsys::ncclComm_t>>,
    pub(in crate::backend::cuda) dev: &'static DeviceState,
    pub(in crate::backend::cuda) rank: usize,
    pub(in crate::backend::cuda) world: usize,
    /// The collectives in flight, watched for the timeout (watchdog.rs).
    pub(in crate::backend::cuda) watch: Watch,
}

impl std::fmt::Debug for ProcessComm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProcessComm(rank {} of {} on cuda:{})", self.rank, self.world, self.dev.ordinal)
    }
}

impl Drop for ProcessComm {
    fn drop(&mut self) {
        let comm = self.comm.get_mut().unwrap_or_else(|p| p.into_inner()).0;
        if comm.is_null() {
            return;
        }
        // A collective still in flight may wait for a peer forever: abort rather than
        // destroy, which would wait for it.
        let stuck = !self.watch.all_done();
        // SAFETY: `comm` was made by `ncclCommInitRank`, is not null (not aborted) and is
        // destroyed or aborted once, here, when nothing can enqueue on it any more
        // (`&mut self`). A failure cannot be reported from `drop`.
        let _ = unsafe {
            if stuck {
                nccl::comm_abort(comm)
            } else {
                nccl::comm_destroy(comm)
            }
        };
    }
}

fn err(device: DeviceId, call: &'static str) -> impl Fn(nccl::NcclError) -> Error {
    move |e| Error::Driver { device, call, code: crate::faults::noted(format!("{:?}", e.0)) }
}

fn comm_err(op: &'static str, reason: String) -> Error {
    Error::InvalidArgument { op, reason }
}

impl CudaBackend {
    pub(in crate::backend::cuda) fn has_comm(&self, device: DeviceId) -> bool {
        device.ordinal().is_some_and(|o| (o as usize) < self.device_count()) && present()
    }

    pub(in crate::backend::cuda) fn comm_id(&self) -> Result<Vec<u8>> {
        if !present() {
            return Err(comm_err("new_comm_id", "libnccl cannot be loaded".into()));
        }
        let id = nccl::get_uniqueid().map_err(err(DeviceId::Cuda(0), "ncclGetUniqueId"))?;
        Ok(id.internal.iter().map(|&c| c as u8).collect())
    }

    pub(in crate::backend::cuda) fn comm_join(
        &self,
        device: DeviceId,
        id: &[u8],
        rank: usize,
        world: usize,
        timeout: Duration,
    ) -> Result<Arc<ProcessComm>> {
        const OP: &str = "join_comm";
        if !present() {
            return Err(comm_err(OP, "libnccl cannot be loaded".into()));
        }
        let dev = self.dev(device)?;
        let mut unique = nsys::ncclUniqueId { internal: [0; 128] };
        if id.len() != unique.internal.len() {
            return Err(comm_err(OP, format!("an NCCL id has 128 bytes, not {}", id.len())));
        }
        for (d, &s) in unique.internal.iter_mut().zip(id) {
            *d = s as std::ffi::c_char;
        }
        let (Ok(n), Ok(r)) = (i32::try_from(world), i32::try_from(rank)) else {
            return Err(comm_err(OP, format!("rank {rank} of {world} does not fit NCCL's `int`")));
        };
        dev.bind()?;
        let mut comm: nsys::ncclComm_t = std::ptr::null_mut();
        // SAFETY: `comm` is a place NCCL writes the new communicator to; `unique` is an
        // id of `ncclGetUniqueId` (through the store) and `r < n`, checked by the caller;
        // the device's context is current, so the communicator uses that device.
        let joined = unsafe { nccl::comm_init_rank(&mut comm, n, unique, r) };
        dev.bind_again()?;
        joined.map_err(err(device, "ncclCommInitRank"))?;
        let pc = Arc::new(ProcessComm { comm: Mutex::new(Handle(comm)), dev, rank, world, watch: Watch::new(timeout) });
        Ok(pc)
    }

    pub(in crate::backend::cuda) fn comm_run(
        &self,
        pc: &Arc<ProcessComm>,
        dtype: DType,
        len: usize,
        op: CommOp<'_, CudaBuffer>,
    ) -> Result<Option<CudaBuffer>> {
        pc.watch.check_healthy()?;
        run(pc, dtype, len, op)
    }
}

/// NCCL's reduction for `op` (`ncclSum` for the collectives that reduce nothing). An
/// average is refused: the group sums and divides by the world size itself, because NCCL
/// 2.28's one-rank out-of-place `ncclAvg` leaves the last element unwritten for some
/// lengths (tests/dist.rs shows it on the GPU).
fn red(op: &CommOp<'_, CudaBuffer>) -> Result<nsys::ncclRedOp_t> {
    let (CommOp::AllReduce { op, .. } | CommOp::ReduceScatter { op, .. }) = op else {
        return Ok(nsys::ncclRedOp_t::ncclSum);
    };
    Ok(match op {
        CommReduce::Sum => nsys::ncclRedOp_t::ncclSum,
        CommReduce::Max => nsys::ncclRedOp_t::ncclMax,
        CommReduce::Min => nsys::ncclRedOp_t::ncclMin,
        CommReduce::Avg => {
            return Err(comm_err(
                "process collective",
                "an average is a sum divided by the world size, never NCCL's ncclAvg".into(),
            ));
        }
    })
}

fn run(pc: &Arc<ProcessComm>, dtype: DType, len: usize, op: CommOp<'_, CudaBuffer>) -> Result<Option<CudaBuffer>> {
    const OP: &str = "process collective";
    let dev = pc.dev;
    let reduction = red(&op)?;
    let input = match op {
        CommOp::AllReduce { buf, .. }
        | CommOp::Broadcast { buf, .. }
        | CommOp::AllGather { buf }
        | CommOp::ReduceScatter { buf, .. }
        | CommOp::Send { buf, .. } => Some(buf),
        CommOp::Recv { .. } => None,
    };
    let bytes = len.checked_mul(dtype.size()).ok_or_else(|| comm_err(OP, format!("{len} elements is too many")))?;
    if let Some(b) = input {
        if b.bytes() != bytes || b.device().ordinal != dev.ordinal {
            return Err(comm_err(OP, format!("the input must be {len} elements on cuda:{}", dev.ordinal)));
        }
    }
    let out_len = match op {
        CommOp::AllGather { .. } => {
            len.checked_mul(pc.world).ok_or_else(|| comm_err(OP, "the gathered length overflows".into()))?
        }
        CommOp::ReduceScatter { .. } if len % pc.world != 0 => {
            return Err(comm_err(OP, format!("{len} elements do not split in {} equal chunks", pc.world)));
        }
        CommOp::ReduceScatter { .. } => len / pc.world,
        CommOp::Send { .. } => 0,
        _ => len,
    };
    if let CommOp::Broadcast { root: peer, .. } | CommOp::Send { peer, .. } | CommOp::Recv { peer } = op {
        if peer >= pc.world {
            return Err(comm_err(OP, format!("rank {peer} is not in a communicator of {}", pc.world)));
        }
    }
    // The current stream; the input waits for its writer there and its free waits for
    // the stream (a reader), the output is allocated there.
    let (s, out) = alloc(dev, dtype, out_len, &input.into_iter().collect::<Vec<_>>())?;
    let guard = pc.comm.lock().unwrap_or_else(|p| p.into_inner());
    if guard.0.is_null() {
        drop(guard);
        return Err(pc
            .watch
            .check_healthy()
            .err()
            .unwrap_or_else(|| comm_err(OP, "the communicator was aborted".into())));
    }
    let (comm, stream, dt) = (guard.0, s.raw.0 as nsys::cudaStream_t, nccl_type(dtype));
    let send = input.map_or(std::ptr::null(), |b| b.ptr() as *const c_void);
    let recv = out.ptr() as *mut c_void;
    dev.bind()?;
    let id = dev.id();
    // Every call below: `send` is the input, `len` elements of `dtype` on this device
    // (checked above), ready on `stream` and kept allocated until `stream` is done with it
    // (`use_on` in `alloc`); `recv` is the output, `out_len` elements allocated on
    // `stream`, written only by this call before any reader waits for it; `comm` is this
    // rank of a live communicator on this device, used under its lock; `dt` is `dtype`'s
    // NCCL type and every rank index is below the world size (checked above).
    let failed = || err(id, op.name())(nccl::NcclError(nsys::ncclResult_t::ncclSystemError));
    let span = timing::begin(&s);
    // SAFETY: the pointers, comm and sizes are valid as said above; the context is current.
    let called = crate::faults::gate(Point::Collective, failed, || unsafe {
        match op {
            CommOp::AllReduce { .. } => {
                nccl::all_reduce(send, recv, len, dt, reduction, comm, stream).map_err(err(id, "ncclAllReduce"))
            }
            CommOp::Broadcast { root, .. } => {
                nccl::broadcast(send, recv, len, dt, root as i32, comm, stream).map_err(err(id, "ncclBroadcast"))
            }
            CommOp::AllGather { .. } => {
                nccl::all_gather(send, recv, len, dt, comm, stream).map_err(err(id, "ncclAllGather"))
            }
            CommOp::ReduceScatter { .. } => nccl::reduce_scatter(send, recv, out_len, dt, reduction, comm, stream)
                .map_err(err(id, "ncclReduceScatter")),
            CommOp::Send { peer, .. } => {
                nccl::send(send, len, dt, peer as i32, comm, stream).map_err(err(id, "ncclSend"))
            }
            CommOp::Recv { peer } => nccl::recv(recv, len, dt, peer as i32, comm, stream).map_err(err(id, "ncclRecv")),
        }
    });
    drop(guard);
    timing::finish(span, &s, &called, || {
        (op.name().into(), format!(r#""elements":{len},"dtype":"{dtype}","ranks":{}"#, pc.world))
    });
    dev.bind_again()?;
    called?;
    pc.watch.queued(pc, op.name(), &s)?;
    match op {
        CommOp::Send { .. } => Ok(None),
        _ => done(out).map(Some),
    }
}
