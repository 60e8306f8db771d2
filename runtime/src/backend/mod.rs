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
pub(crate) mod blocks;
mod cuda;
pub(crate) mod dispatch;
pub(crate) mod fast_map;
pub(crate) mod few;
pub(crate) mod host;
pub(crate) mod pinned_pool;
pub(crate) mod spin_lock;
pub(crate) mod sync;
pub(crate) mod transfer;
pub(crate) mod workers;

use std::sync::OnceLock;

use crate::device_id::DeviceId;
use crate::error::{Error, Result};

pub(crate) use api::errors::events_not_complete;
pub(crate) use api::gemm::Gemm;
pub(crate) use api::norm::{Norm, NormGrads};
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
    crate::trace::start_from_env().map_err(no_backend)?;
    crate::faults::start_from_env().map_err(no_backend)?;
    let cuda = |b: cuda::CudaBackend| AnyBackend::new(Imp::Cuda(Box::leak(Box::new(b))));
    match parse_backend(&requested).map_err(no_backend)? {
        Requested::Host => Ok(AnyBackend::new(Imp::Host(host::backend()?))),
        Requested::Cuda => match cuda::open() {
            Ok(b) => Ok(cuda(b)),
            Err(why) => Err(no_backend(format!("{why}; or set LOCUS_BACKEND=host to run on the host backend"))),
        },
        Requested::Auto => match cuda::open() {
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
    }
}

/// What `LOCUS_BACKEND` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Requested {
    Auto,
    Cuda,
    Host,
}

/// A value of `LOCUS_BACKEND`: `auto` (or empty), `cuda` or `host`, spaces around it
/// ignored. The error is the reason of an `Error::NoBackend`, whose message names the
/// variable and the values it takes.
fn parse_backend(v: &str) -> std::result::Result<Requested, String> {
    match v.trim() {
        "host" => Ok(Requested::Host),
        "cuda" => Ok(Requested::Cuda),
        "auto" | "" => Ok(Requested::Auto),
        other => Err(format!("`{other}` is not a backend")),
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

#[cfg(test)]
mod tests {
    use super::{parse_backend, Requested};
    use crate::env_fuzz;
    use crate::error::Error;

    #[test]
    fn backend_values_never_panic_and_name_the_variable_when_refused() {
        let values = env_fuzz::values(0x4241_434b, &["auto", "cuda", "host", ""], env_fuzz::CASES);
        let n = env_fuzz::run("LOCUS_BACKEND", &values, |v| match parse_backend(v) {
            Ok(r) => {
                let want = match v.trim() {
                    "host" => Requested::Host,
                    "cuda" => Requested::Cuda,
                    "auto" | "" => Requested::Auto,
                    _ => panic!("`{v}` accepted as {r:?}"),
                };
                assert_eq!(r, want);
            }
            Err(reason) => {
                let e = Error::NoBackend { requested: v.into(), reason: reason.clone() }.to_string();
                env_fuzz::assert_clear(&reason, "", v, &["is not a backend"]);
                env_fuzz::assert_clear(&e, "LOCUS_BACKEND", &v.repeat(2), &["`auto`, `cuda` or `host`"]);
            }
        });
        assert!(n >= 4000, "{n} values");
        assert_eq!(parse_backend(" host\n"), Ok(Requested::Host));
        assert!(parse_backend("Host").is_err());
    }
}
