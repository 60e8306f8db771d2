//! The backends, and the choice of backend for the process (this file: selection only).
//!
//! The folders are the layers, each importing only those listed before it:
//! - `api/`: the contract: the traits [`BackendDevice`] and [`BackendStorage`], the ops as
//!   values, user kernels, permutations, matmul precision;
//! - `account.rs`, `workers.rs`, `pinned_pool.rs`: per-device memory accounts, the
//!   process's worker pool, the caching pinned-host allocator;
//! - `sync/`: the current stream, the ordering books, the hazard checker;
//! - `transfer/`: which way a pageable copy goes, the inline upload and download;
//! - `host/` and `cuda/`: the two backends (`host/kernels/` holds every CPU loop);
//! - `dispatch/`: the enum layer above them ([`Buffer`], the stream, event, graph and
//!   communicator handles) and the capture gate.
//!
//! Host placements (`cpu`, `pinned`) always run on the host backend; `cuda:N` runs on the
//! backend chosen by `LOCUS_BACKEND`.

mod account;
pub(crate) mod api;
mod cuda;
pub(crate) mod dispatch;
pub(crate) mod host;
pub(crate) mod pinned_pool;
pub(crate) mod sync;
pub(crate) mod transfer;
pub(crate) mod workers;

use std::sync::OnceLock;

use crate::device_id::DeviceId;
use crate::error::{Error, Result};

pub(crate) use api::errors::events_not_complete;
pub(crate) use api::gemm::Gemm;
pub(crate) use api::op::{bad_target, index_out_of_range, Gather, SoftmaxOp};
pub(crate) use api::op::{
    float_only, same_length, BinaryOp, Blocks, Collective, CommOp, CommReduce, CompareOp, ParamOp, ReduceKind, UnaryOp,
};
pub(crate) use api::permute::{Permute, MAX_DIMS as MAX_PERMUTE_DIMS};
pub(crate) use api::precision::MatmulPrecision;
pub(crate) use api::rand::{normal, normal_seed, rand_bits, Dist};
pub(crate) use api::release::Release;
pub(crate) use api::traits::{BackendDevice, BackendStorage};
pub(crate) use dispatch::backend::{AnyBackend, Imp};
pub(crate) use dispatch::buffer::Buffer;
pub(crate) use dispatch::handles::{AnyComm, AnyEvent, AnyGraph, AnyStream};
pub(crate) use host::HostBuffer;
pub(crate) use sync::{cross_stream_waits, cross_stream_waits_skipped};

static SELECTED: OnceLock<Result<AnyBackend>> = OnceLock::new();

/// The backend chosen by `LOCUS_BACKEND` (`auto` when unset), set up on first use.
pub(crate) fn selected() -> Result<AnyBackend> {
    SELECTED.get_or_init(choose).clone()
}

fn choose() -> Result<AnyBackend> {
    let requested = std::env::var("LOCUS_BACKEND").unwrap_or_else(|_| "auto".into());
    let no_backend = |reason: String| Error::NoBackend { requested: requested.clone(), reason };
    let cuda = |b: cuda::CudaBackend| AnyBackend::new(Imp::Cuda(Box::leak(Box::new(b))));
    match requested.trim() {
        "host" => Ok(AnyBackend::new(Imp::Host(host::backend()?))),
        "cuda" => match cuda::open() {
            Ok(b) => Ok(cuda(b)),
            Err(why) => Err(no_backend(format!("{why}; or set LOCUS_BACKEND=host to run on the host backend"))),
        },
        "auto" | "" => match cuda::open() {
            Ok(b) => Ok(cuda(b)),
            Err(why) => {
                let b = AnyBackend::new(Imp::Host(host::backend()?));
                eprintln!(
                    "locus: using the host backend, {} simulated CUDA devices (no GPU: {why}). \
                     LOCUS_HOST_DEVICES sets the count; LOCUS_BACKEND=cuda requires a GPU.",
                    b.device_count()
                );
                Ok(b)
            }
        },
        other => Err(no_backend(format!("`{other}` is not a backend"))),
    }
}

/// The backend that runs ops on `device`, after checking that the device exists. While
/// the thread captures a graph, behind the capture gate.
pub(crate) fn for_device(device: DeviceId) -> Result<AnyBackend> {
    Ok(dispatch::backend::behind_gate(for_device_now(device)?))
}

/// The backend that runs ops on `device`, never behind the capture gate.
pub(crate) fn for_device_now(device: DeviceId) -> Result<AnyBackend> {
    match device {
        DeviceId::Cpu | DeviceId::Pinned => Ok(AnyBackend::new(Imp::Host(host::backend()?))),
        DeviceId::Cuda(ordinal) => {
            let b = selected()?;
            let count = b.device_count();
            if ordinal as usize >= count {
                return Err(Error::NoSuchDevice { ordinal, count });
            }
            Ok(b)
        }
    }
}

/// Whether two backends are the same one.
pub(crate) fn same(a: &AnyBackend, b: &AnyBackend) -> bool {
    a.same(b)
}

/// The name of the selected backend: `"host"` or `"cuda"`.
///
/// ```
/// # extern crate locus_runtime as locus;
/// assert!(matches!(locus::backend_name().unwrap(), "host" | "cuda"));
/// ```
pub fn backend_name() -> Result<&'static str> {
    Ok(selected()?.name())
}

/// The number of CUDA devices (real, or simulated by the host backend).
///
/// ```
/// # extern crate locus_runtime as locus;
/// assert!(locus::device_count().unwrap() >= 1);
/// ```
pub fn device_count() -> Result<usize> {
    Ok(selected()?.device_count())
}
