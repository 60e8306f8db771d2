//! The backend traits, and the choice of backend for the process.
//!
//! Ops above this module see the device-level [`BackendDevice`] (one per backend, picked
//! by [`for_device`]) and the storage-level [`BackendStorage`] of a [`Buffer`] (see
//! `traits.rs`); the host simulation and the CUDA implementation live behind them. Host
//! placements (`cpu`, `pinned`) always run on the host implementation; `cuda:N` runs on
//! the backend chosen by `LOCUS_BACKEND`.

mod account;
mod buffer;
pub(crate) mod capture;
pub(crate) mod copy_paths;
pub(crate) mod copy_threads;
mod cuda;
pub(crate) mod current_stream;
pub(crate) mod hazard;
pub(crate) mod host;
pub(crate) mod host_cache;
mod host_collective;
mod host_kernels;
mod host_math;
mod host_matmul;
mod host_permute;
mod host_rows;
mod host_select;
mod huge_pages;
pub(crate) mod inline_copy;
pub(crate) mod inline_download;
mod op;
pub(crate) mod ordering;
mod permute;
pub(crate) mod pinned_pool;
pub(crate) mod precision;
mod traits;
pub(crate) mod user_kernel;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::device_id::DeviceId;
use crate::error::{Error, Result};

pub(crate) use buffer::Buffer;
pub(crate) use host::HostBuffer;
pub(crate) use op::{bad_target, Gather, SoftmaxOp};
pub(crate) use op::{
    float_only, same_length, BinaryOp, Blocks, Collective, CommOp, CommReduce, CompareOp, Gemm, ParamOp, ReduceOp,
    UnaryOp,
};
pub(crate) use permute::{Permute, MAX_DIMS as MAX_PERMUTE_DIMS};
pub(crate) use precision::MatmulPrecision;
pub(crate) use traits::{BackendDevice, BackendStorage};

/// A stream of one backend: a simulated stream (a queue with its own worker) on the
/// host, a reference-counted driver stream on CUDA.
#[derive(Clone, Debug)]
pub(crate) enum RawStream {
    Host(Arc<host::HostStream>),
    Cuda(Arc<cuda::StreamObj>),
}

impl RawStream {
    /// The stream as code outside locus names it: the driver's `CUstream` on CUDA; on
    /// the host backend an opaque non-null token, distinct for each live stream.
    pub(crate) fn handle(&self) -> usize {
        match self {
            RawStream::Host(s) => Arc::as_ptr(s) as usize,
            RawStream::Cuda(s) => s.handle(),
        }
    }

    /// Whether both name the same stream.
    pub(crate) fn same(&self, other: &RawStream) -> bool {
        match (self, other) {
            (RawStream::Host(a), RawStream::Host(b)) => Arc::ptr_eq(a, b),
            (RawStream::Cuda(a), RawStream::Cuda(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

/// An event of one backend: on the host a point in a simulated stream's queue.
#[derive(Clone, Debug)]
pub(crate) enum RawEvent {
    Host(Arc<host::HostEvent>),
    Cuda(Arc<cuda::EventObj>),
}

/// A captured graph of one backend, ready to replay.
#[derive(Clone, Debug)]
pub(crate) enum RawGraph {
    Host(Arc<host::HostGraph>),
    Cuda(Arc<cuda::GraphObj>),
}

impl RawGraph {
    /// Whether `b` was made in this graph's capture (it belongs to the graph).
    pub(crate) fn owns(&self, b: &Buffer) -> bool {
        match (self, b) {
            (RawGraph::Host(g), Buffer::Host(h)) => g.owns(h),
            (RawGraph::Cuda(g), Buffer::Cuda(c)) => g.owns(c),
            _ => false,
        }
    }

    /// Buffers made in the capture that are still alive.
    pub(crate) fn live_buffers(&self) -> usize {
        match self {
            RawGraph::Host(g) => g.live_buffers(),
            RawGraph::Cuda(g) => g.live_buffers(),
        }
    }
}

/// A communicator between processes, one rank per process (NCCL's, on the cuda
/// backend; the host backend moves process collectives through host memory instead).
#[derive(Clone, Debug)]
pub(crate) enum RawComm {
    Cuda(Arc<cuda::ProcessComm>),
}

/// What gives memory made outside locus back to its owner (a tensor made by
/// `Tensor::from_raw_parts`): run once, when the memory's last use is over. Dropped
/// without [`Release::leak`], it runs then.
pub(crate) struct Release(std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>);

impl Release {
    pub(crate) fn new(f: impl FnOnce() + Send + 'static) -> Self {
        Release(std::sync::Mutex::new(Some(Box::new(f))))
    }

    fn take(&mut self) -> Option<Box<dyn FnOnce() + Send>> {
        self.0.get_mut().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Gives the memory back now.
    pub(crate) fn run(mut self) {
        if let Some(f) = self.take() {
            f();
        }
    }

    /// Never gives the memory back: for memory whose last use cannot be observed, which
    /// must not be handed to its owner to reuse.
    pub(crate) fn leak(mut self) {
        std::mem::forget(self.take());
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        if let Some(f) = self.take() {
            f();
        }
    }
}

impl std::fmt::Debug for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Release")
    }
}

static CROSS_STREAM_WAITS: AtomicU64 = AtomicU64::new(0);

/// Counts a wait inserted because a tensor was used on a stream other than its writer's.
pub(crate) fn count_cross_stream_wait() {
    CROSS_STREAM_WAITS.fetch_add(1, Ordering::Relaxed);
}

/// How many cross-stream waits locus has inserted in this process.
pub(crate) fn cross_stream_waits() -> u64 {
    CROSS_STREAM_WAITS.load(Ordering::Relaxed)
}

/// How many cross-stream uses needed no wait of their own (see [`ordering`]).
pub(crate) fn cross_stream_waits_skipped() -> u64 {
    ordering::skipped()
}

/// The error of `elapsed` on events that were not both recorded and completed, worded the
/// same on every backend (the driver says `CUDA_ERROR_NOT_READY` or `…_INVALID_HANDLE`).
pub(crate) fn events_not_complete() -> Error {
    Error::InvalidArgument { op: "elapsed", reason: "both events must be recorded and completed first".into() }
}

/// The one error for memory, a stream or an event of one backend handed to the other (a
/// bug above the backend, reported as an error rather than a panic).
pub(crate) fn foreign(backend: &str, what: &str) -> Error {
    Error::InvalidArgument {
        op: "backend",
        reason: format!("the {backend} backend was handed {what} of the other backend"),
    }
}

/// The random bits of element `i` under `seed` (SplitMix64 of a counter), shared by all
/// backends so that `rand` gives the same values everywhere.
pub(crate) fn rand_bits(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

static SELECTED: OnceLock<Result<&'static dyn BackendDevice>> = OnceLock::new();

/// The backend chosen by `LOCUS_BACKEND` (`auto` when unset), set up on first use.
pub(crate) fn selected() -> Result<&'static dyn BackendDevice> {
    SELECTED.get_or_init(choose).clone()
}

fn choose() -> Result<&'static dyn BackendDevice> {
    let requested = std::env::var("LOCUS_BACKEND").unwrap_or_else(|_| "auto".into());
    let no_backend = |reason: String| Error::NoBackend { requested: requested.clone(), reason };
    match requested.trim() {
        "host" => Ok(host::backend()?),
        "cuda" => match cuda::open() {
            Ok(b) => Ok(Box::leak(Box::new(b))),
            Err(why) => Err(no_backend(format!("{why}; or set LOCUS_BACKEND=host to run on the host backend"))),
        },
        "auto" | "" => match cuda::open() {
            Ok(b) => Ok(Box::leak(Box::new(b))),
            Err(why) => {
                let b = host::backend()?;
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
/// the thread captures a graph, the [`capture::Gate`] in front of it.
pub(crate) fn for_device(device: DeviceId) -> Result<&'static dyn BackendDevice> {
    let backend = for_device_now(device)?;
    match capture::active() {
        Some(_) => Ok(&capture::GATE),
        None => Ok(backend),
    }
}

/// The backend that runs ops on `device`, never the capture gate.
pub(crate) fn for_device_now(device: DeviceId) -> Result<&'static dyn BackendDevice> {
    match device {
        DeviceId::Cpu | DeviceId::Pinned => Ok(host::backend()?),
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

/// Whether two backend references are the same object.
pub(crate) fn same(a: &dyn BackendDevice, b: &dyn BackendDevice) -> bool {
    std::ptr::addr_eq(a as *const dyn BackendDevice, b as *const dyn BackendDevice)
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
