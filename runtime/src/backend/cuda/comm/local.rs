//! NCCL collectives (broadcast, all-reduce sum, all-gather) over devices of the cuda
//! backend, from one thread with one communicator per device (`ncclCommInitAll`).
//!
//! NCCL is loaded at run time. Without libnccl, or with fewer than two devices, the
//! backend answers `None` and the caller falls back to peer copies; no NCCL symbol is
//! touched before `is_culib_present` says the library is there (cudarc panics on a
//! missing library).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{LazyLock, Mutex, OnceLock};

use cudarc::nccl::{result as nccl, sys as nsys};

use crate::backend::cuda::driver::buffer::CudaBuffer;
use crate::backend::cuda::driver::device::{DeviceState, Handle};
use crate::backend::cuda::driver::memory::current;
use crate::backend::cuda::CudaBackend;
use crate::backend::Collective;
use crate::device_id::DeviceId;
use crate::element::DType;
use crate::error::{Error, Result};

/// Communicators by device list: NCCL ranks are positions in the list.
type Comms = Vec<Handle<nsys::ncclComm_t>>;

// SAFETY: a communicator may be used from any thread, one call at a time; locus uses
// them only under a lock (`COMMS` here, each `ProcessComm`'s own in comm.rs) (so `Handle<ncclComm_t>` is `Send` but not `Sync`).
unsafe impl Send for Handle<nsys::ncclComm_t> {}

/// Communicators live for the process. The lock also keeps two threads from enqueueing
/// on the same communicators at once, which NCCL does not allow.
static COMMS: LazyLock<Mutex<HashMap<Vec<u32>, Comms>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

/// Whether libnccl can be loaded, checked once.
pub(in crate::backend::cuda) fn present() -> bool {
    static PRESENT: OnceLock<bool> = OnceLock::new();
    // SAFETY: only tries to load libnccl (libloading, dropped at once) and touches no
    // symbol; cudarc resolves NCCL symbols on their first use, which this check guards.
    *PRESENT.get_or_init(|| unsafe { nsys::is_culib_present() })
}

pub(in crate::backend::cuda) fn nccl_type(dtype: DType) -> nsys::ncclDataType_t {
    match dtype {
        DType::F32 => nsys::ncclDataType_t::ncclFloat32,
        DType::F64 => nsys::ncclDataType_t::ncclFloat64,
        DType::I32 => nsys::ncclDataType_t::ncclInt32,
        DType::I64 => nsys::ncclDataType_t::ncclInt64,
        DType::U8 => nsys::ncclDataType_t::ncclUint8,
        DType::BF16 => nsys::ncclDataType_t::ncclBfloat16,
        DType::F16 => nsys::ncclDataType_t::ncclFloat16,
    }
}

fn nccl_err(device: DeviceId, call: &'static str) -> impl Fn(nccl::NcclError) -> Error {
    move |e| Error::Driver { device, call, code: crate::faults::noted(format!("{:?}", e.0)) }
}

/// Makes locus' record of the thread's current context true again after NCCL, which
/// switches devices inside its calls. Binding two distinct devices in turn forces at
/// least the second into a real driver call, whatever the record said before.
fn resync(states: &[&'static DeviceState]) -> Result<()> {
    states[0].bind()?;
    states[1].bind()
}

/// `op` over `devices` through NCCL, or `None` when NCCL cannot run it.
pub(in crate::backend::cuda) fn collective(
    b: &CudaBackend,
    devices: &[DeviceId],
    dtype: DType,
    len: usize,
    op: Collective<'_, CudaBuffer>,
) -> Result<Option<Vec<CudaBuffer>>> {
    if devices.len() < 2 || len == 0 || !present() || devices.len() > i32::MAX as usize {
        return Ok(None);
    }
    crate::faults::check(crate::faults::Point::Collective, devices[0], "ncclGroupStart")?;
    let states: Vec<&'static DeviceState> = devices.iter().map(|&d| b.dev(d)).collect::<Result<_>>()?;
    // A rank per device: the devices are distinct (the trait's contract).
    let ordinals: Vec<u32> = states.iter().map(|d| d.ordinal).collect();
    let n = states.len();
    let bytes = len * dtype.size();
    let out_bytes = match op {
        Collective::AllGather(_) => bytes * n,
        _ => bytes,
    };
    let inputs: Vec<Option<&CudaBuffer>> = match op {
        Collective::Broadcast { root, buf } => (0..n).map(|i| (i == root).then_some(buf)).collect(),
        Collective::AllReduceSum(bufs) | Collective::AllGather(bufs) => bufs.iter().map(|&b| Some(b)).collect(),
    };
    if inputs.len() != n || inputs.iter().flatten().any(|c| c.bytes() != bytes) {
        return Err(Error::InvalidArgument { op: "collective", reason: "one input of equal length per device".into() });
    }

    let mut table = COMMS.lock().unwrap_or_else(|p| p.into_inner());
    let comms = match table.entry(ordinals) {
        Entry::Occupied(e) => e.into_mut(),
        Entry::Vacant(v) => {
            let made = init(&states);
            resync(&states)?;
            v.insert(made?)
        }
    };
    // Outputs on each device's current stream, which first waits for the inputs' writers.
    let mut outs = Vec::with_capacity(n);
    let mut streams = Vec::with_capacity(n);
    for (dev, input) in states.iter().zip(&inputs) {
        let s = current(dev);
        if let Some(buf) = input {
            buf.use_on(&s)?;
        }
        outs.push(CudaBuffer::alloc(dev, &s, out_bytes)?);
        streams.push(s);
    }
    let dt = nccl_type(dtype);
    let first = devices[0];
    nccl::group_start().map_err(nccl_err(first, "ncclGroupStart"))?;
    let mut failed = None;
    for i in 0..n {
        let (dev, comm, s) = (states[i], comms[i].0, streams[i].raw.0 as nsys::cudaStream_t);
        if let Err(e) = dev.bind() {
            failed.get_or_insert(e);
            continue;
        }
        let recv = outs[i].ptr() as *mut c_void;
        let send = match inputs[i] {
            Some(buf) => buf.ptr() as *const c_void,
            None => recv as *const c_void,
        };
        // SAFETY (the three calls): `recv` is `outs[i]`, `out_bytes` bytes of device i
        // (`len` elements of `dtype`, or `n * len` for all-gather), allocated on stream `s`;
        // `send` is device i's input (`len` elements of `dtype`, checked above), ready on
        // `s` (use_on above), or `recv` itself for a broadcast's non-root ranks, which NCCL
        // then only writes. `comm` is rank i of the communicators made for exactly these
        // ordinals (under the `COMMS` lock, held until the group ends, so no other thread
        // enqueues on them); `dt` is `dtype`'s NCCL type and `root < n`. The inputs are
        // borrowed by the caller and their frees wait for `s` (a reader), the outputs are
        // freed on `s`, so all stay allocated until the collective is done; device i's
        // context is current (bind above).
        let call = match op {
            // SAFETY: see above.
            Collective::Broadcast { root, .. } => unsafe {
                nccl::broadcast(send, recv, len, dt, root as i32, comm, s).map_err(nccl_err(dev.id(), "ncclBroadcast"))
            },
            // SAFETY: see above.
            Collective::AllReduceSum(_) => unsafe {
                nccl::all_reduce(send, recv, len, dt, nsys::ncclRedOp_t::ncclSum, comm, s)
                    .map_err(nccl_err(dev.id(), "ncclAllReduce"))
            },
            // SAFETY: see above.
            Collective::AllGather(_) => unsafe {
                nccl::all_gather(send, recv, len, dt, comm, s).map_err(nccl_err(dev.id(), "ncclAllGather"))
            },
        };
        if let Err(e) = call {
            failed.get_or_insert(e);
        }
    }
    // The group must be closed even when a call in it failed.
    let ended = nccl::group_end().map_err(nccl_err(first, "ncclGroupEnd"));
    resync(&states)?;
    if let Some(e) = failed {
        return Err(e);
    }
    ended?;
    Ok(Some(outs))
}

/// One communicator per device of `states`, rank = position.
fn init(states: &[&'static DeviceState]) -> Result<Comms> {
    let list: Vec<i32> = states.iter().map(|d| d.ctx.cu_device()).collect();
    let mut comms = vec![std::ptr::null_mut(); list.len()];
    // SAFETY: `comms` has room for `list.len()` communicators, which NCCL writes; `list`
    // holds that many device handles (distinct, from `cu_device` of live devices), read
    // during the call; the count fits an `i32` (the caller bounds the device list).
    unsafe { nccl::comm_init_all(comms.as_mut_ptr(), list.len() as i32, list.as_ptr()) }
        .map_err(nccl_err(states[0].id(), "ncclCommInitAll"))?;
    Ok(comms.into_iter().map(Handle).collect())
}
