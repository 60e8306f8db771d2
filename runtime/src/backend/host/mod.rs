//! The host backend: N simulated CUDA devices in host memory.
//!
//! Each simulated device has its own memory account with a capacity
//! (`LOCUS_HOST_DEVICE_MEMORY` bytes, default 16 GiB), so an over-large allocation is
//! `Error::OutOfMemory` as on a GPU. Host memory comes from the host cache
//! (`LOCUS_HOST_CACHE`), and kernels split large work over the worker pool
//! (`LOCUS_HOST_THREADS`); a bad value of either is this backend's configuration error. `cpu` and `pinned` memory are ordinary host memory
//! on every backend, and run here.

use std::sync::OnceLock;

mod buffer;
pub(crate) mod cache;
mod collective;
mod device;
mod graph;
// The checker exists in debug builds only; so do the tests of it.
#[cfg(all(test, debug_assertions))]
mod hazard_tests;
mod huge_pages;
mod inline;
pub(in crate::backend) mod kernels;
mod launch;
mod queue;

mod ops;
mod storage;
mod streams;
mod user_kernel;

pub(crate) use buffer::HostBuffer;
pub(crate) use graph::HostGraph;
use streams::current_stream;
pub(crate) use streams::{current_of, with_current};
pub(crate) use streams::{HostEvent, HostStream};

use crate::backend::account::MemoryAccount;
use crate::backend::workers;
use crate::device_id::DeviceId;
use crate::error::{Error, Result};

const DEFAULT_DEVICES: usize = 2;
/// The most simulated devices (`LOCUS_HOST_DEVICES`): each has its own account and
/// stream state, and CUDA itself has no more ordinals per process than this.
const MAX_DEVICES: usize = 1024;
const DEFAULT_DEVICE_MEMORY: usize = 16 << 30;

/// The host backend.
#[derive(Debug)]
pub(crate) struct HostBackend {
    /// `cpu`, `pinned`, then one per simulated CUDA device.
    accounts: Vec<MemoryAccount>,
    /// Set when `LOCUS_HOST_DEVICES` or `LOCUS_HOST_DEVICE_MEMORY` does not parse.
    config_error: Option<Error>,
}

static HOST: OnceLock<HostBackend> = OnceLock::new();

/// The host backend of this process, configured from the environment on first use.
pub(crate) fn host() -> &'static HostBackend {
    HOST.get_or_init(HostBackend::from_env)
}

/// The host backend as the process backend: an error if its configuration is bad.
pub(crate) fn backend() -> Result<&'static HostBackend> {
    let h = host();
    match &h.config_error {
        Some(e) => Err(e.clone()),
        None => Ok(h),
    }
}

fn env_number(name: &str, default: usize) -> Result<usize> {
    match std::env::var(name) {
        Err(_) => Ok(default),
        Ok(v) => v.trim().parse().map_err(|_| Error::NoBackend {
            requested: std::env::var("LOCUS_BACKEND").unwrap_or_else(|_| "auto".into()),
            reason: format!("{name}=`{v}` is not a non-negative integer"),
        }),
    }
}

impl HostBackend {
    fn from_env() -> Self {
        let devices = env_number("LOCUS_HOST_DEVICES", DEFAULT_DEVICES).and_then(|n| {
            if n > MAX_DEVICES {
                return Err(Error::NoBackend {
                    requested: std::env::var("LOCUS_BACKEND").unwrap_or_else(|_| "auto".into()),
                    reason: format!("LOCUS_HOST_DEVICES={n} is more than the host backend simulates ({MAX_DEVICES})"),
                });
            }
            Ok(n)
        });
        let memory = env_number("LOCUS_HOST_DEVICE_MEMORY", DEFAULT_DEVICE_MEMORY);
        let delay = queue::configure().map_err(|reason| Error::NoBackend {
            requested: std::env::var("LOCUS_BACKEND").unwrap_or_else(|_| "auto".into()),
            reason,
        });
        // The worker pool and the host cache read their own variables (and fall back to
        // their defaults); a bad value is this backend's configuration error.
        let pool = [workers::thread_count_var("LOCUS_HOST_THREADS"), cache::cap_var().map(|_| None)]
            .into_iter()
            .find_map(|r| r.err())
            .map_or(Ok(()), |reason| {
                Err(Error::NoBackend {
                    requested: std::env::var("LOCUS_BACKEND").unwrap_or_else(|_| "auto".into()),
                    reason,
                })
            });
        let config_error =
            devices.as_ref().err().or(memory.as_ref().err()).or(delay.as_ref().err()).or(pool.as_ref().err()).cloned();
        let (devices, memory) = (devices.unwrap_or(0), memory.unwrap_or(0));
        let mut accounts =
            vec![MemoryAccount::new(DeviceId::Cpu, usize::MAX), MemoryAccount::new(DeviceId::Pinned, usize::MAX)];
        accounts.extend((0..devices).map(|n| MemoryAccount::new(DeviceId::Cuda(n as u32), memory)));
        HostBackend { accounts, config_error }
    }

    /// The memory account of `device`.
    pub(crate) fn account(&'static self, device: DeviceId) -> Result<&'static MemoryAccount> {
        let i = match device {
            DeviceId::Cpu => 0,
            DeviceId::Pinned => 1,
            DeviceId::Cuda(n) => 2 + n as usize,
        };
        self.accounts
            .get(i)
            .ok_or(Error::NoSuchDevice { ordinal: device.ordinal().unwrap_or(0), count: self.accounts.len() - 2 })
    }

    /// Host memory of `bytes` bytes on `device` (a host placement or a simulated device,
    /// where the current stream owns it) whose contents are initialised but unspecified:
    /// pageable memory is zeroed, a reused pinned block keeps its old bytes. For a copy or
    /// kernel that writes every byte before the buffer is shared.
    pub(crate) fn alloc_for_overwrite(&'static self, device: DeviceId, bytes: usize) -> Result<HostBuffer> {
        let stream = (!device.is_host()).then(|| current_stream(device));
        HostBuffer::alloc(self.account(device)?, bytes, stream)
    }

    #[cfg(feature = "ndarray")]
    /// The elements of `v` as memory of the `cpu` placement, without a copy.
    pub(crate) fn adopt_vec<T: crate::element::Element>(&'static self, v: Vec<T>) -> Result<HostBuffer> {
        HostBuffer::from_vec(self.account(DeviceId::Cpu)?, v)
    }

    /// The bytes of `b`, for host code to read now: a simulated device's memory after
    /// the host waited for the stream that wrote it.
    pub(in crate::backend::host) fn read_now<'a>(&'static self, h: &'a HostBuffer) -> Result<&'a [u8]> {
        let writer = h.uses().writer.clone();
        if let Some(s) = writer {
            s.synchronize()?;
        }
        Ok(h.bytes())
    }
}

/// Simulated pinned memory is page-aligned, like the real thing.
fn pinned_layout(bytes: usize) -> Result<std::alloc::Layout> {
    std::alloc::Layout::from_size_align(bytes.max(1), 4096).map_err(|_| Error::OutOfMemory {
        device: DeviceId::Pinned,
        requested: bytes,
        free: 0,
    })
}
