//! The host backend: N simulated CUDA devices in host memory.
//!
//! Each simulated device has its own memory account with a capacity
//! (`LOCUS_HOST_DEVICE_MEMORY` bytes, default 16 GiB), so an over-large allocation is
//! `Error::OutOfMemory` as on a GPU. Host memory comes from the host cache
//! (`LOCUS_HOST_CACHE`), and kernels split large work over the worker pool
//! (`LOCUS_HOST_THREADS`, copies over `LOCUS_COPY_THREADS`); a bad value of any is this
//! backend's configuration error. `cpu` and `pinned` memory are ordinary host memory
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

/// `LOCUS_HOST_DEVICES` (`None`: unset): a count from 0 to [`MAX_DEVICES`].
fn parse_devices(v: Option<&str>) -> std::result::Result<usize, String> {
    let Some(v) = v else { return Ok(DEFAULT_DEVICES) };
    match v.trim().parse::<usize>() {
        Ok(n) if n > MAX_DEVICES => {
            Err(format!("LOCUS_HOST_DEVICES={n} is more than the host backend simulates ({MAX_DEVICES})"))
        }
        Ok(n) => Ok(n),
        Err(_) => Err(format!("LOCUS_HOST_DEVICES=`{v}` is not a number of devices from 0 to {MAX_DEVICES}")),
    }
}

/// `LOCUS_HOST_DEVICE_MEMORY` (`None`: unset): the bytes of each simulated device, any
/// `usize` (an account adds with `checked_add`, so even `usize::MAX` overflows nothing).
fn parse_device_memory(v: Option<&str>) -> std::result::Result<usize, String> {
    let Some(v) = v else { return Ok(DEFAULT_DEVICE_MEMORY) };
    v.trim()
        .parse()
        .map_err(|_| format!("LOCUS_HOST_DEVICE_MEMORY=`{v}` is not a number of bytes from 0 to {}", usize::MAX))
}

impl HostBackend {
    fn from_env() -> Self {
        let no_backend = |reason| Error::NoBackend {
            requested: std::env::var("LOCUS_BACKEND").unwrap_or_else(|_| "auto".into()),
            reason,
        };
        let var = |name| std::env::var(name).ok();
        let devices = parse_devices(var("LOCUS_HOST_DEVICES").as_deref()).map_err(no_backend);
        let memory = parse_device_memory(var("LOCUS_HOST_DEVICE_MEMORY").as_deref()).map_err(no_backend);
        let delay = queue::configure().map_err(no_backend);
        // The worker pool and the host cache read their own variables (and fall back to
        // their defaults); a bad value is this backend's configuration error.
        let pool = [
            workers::thread_count_var("LOCUS_HOST_THREADS"),
            workers::thread_count_var("LOCUS_COPY_THREADS"),
            cache::cap_var().map(|_| None),
        ]
        .into_iter()
        .find_map(|r| r.err())
        .map_or(Ok(()), |reason| Err(no_backend(reason)));
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
    std::alloc::Layout::from_size_align(bytes.max(1), 4096)
        .map_err(|_| crate::backend::blocks::out_of_memory(DeviceId::Pinned, bytes, 0))
}

#[cfg(test)]
mod tests {
    use super::{cache, parse_device_memory, parse_devices, DEFAULT_DEVICES, DEFAULT_DEVICE_MEMORY, MAX_DEVICES};
    use crate::backend::account::MemoryAccount;
    use crate::device_id::DeviceId;
    use crate::env_fuzz;

    /// The value as an integer, when it is one (of any size) after `trim`.
    fn integer(v: &str) -> Option<u128> {
        let t = v.trim();
        let digits = t.strip_prefix('+').unwrap_or(t);
        (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
            .then(|| digits.bytes().try_fold(0u128, |n, b| n.checked_mul(10)?.checked_add(u128::from(b - b'0'))))
            .map(|n| n.unwrap_or(u128::MAX))
    }

    #[test]
    fn device_counts_never_panic_and_stay_under_the_cap() {
        let values = env_fuzz::values(0x4445_5653, &["2", "0", "1024", "1025"], env_fuzz::CASES);
        let n = env_fuzz::run("LOCUS_HOST_DEVICES", &values, |v| match parse_devices(Some(v)) {
            Ok(n) => assert!(n <= MAX_DEVICES && integer(v) == Some(n as u128), "`{v}` gave {n}"),
            Err(e) => {
                assert!(integer(v).is_none_or(|n| n > MAX_DEVICES as u128), "`{v}` refused: {e}");
                env_fuzz::assert_clear(&e, "LOCUS_HOST_DEVICES", v, &["1024"]);
            }
        });
        assert!(n >= 4000, "{n} values");
        assert_eq!(parse_devices(None), Ok(DEFAULT_DEVICES));
        assert_eq!(parse_devices(Some(" 1024\t")), Ok(1024));
        // A hundred million accounts would be refused, not allocated.
        assert!(parse_devices(Some("100000000")).unwrap_err().contains("more than the host backend simulates (1024)"));
    }

    #[test]
    fn device_memory_never_panics_and_any_size_is_safe_to_account() {
        let values = env_fuzz::values(0x4d45_4d53, &["17179869184", "0", "18446744073709551615"], env_fuzz::CASES);
        let n = env_fuzz::run("LOCUS_HOST_DEVICE_MEMORY", &values, |v| match parse_device_memory(Some(v)) {
            Ok(n) => assert_eq!(integer(v), Some(n as u128), "`{v}` gave {n}"),
            Err(e) => {
                assert!(integer(v).is_none_or(|n| n > usize::MAX as u128), "`{v}` refused: {e}");
                env_fuzz::assert_clear(&e, "LOCUS_HOST_DEVICE_MEMORY", v, &["number of bytes"]);
            }
        });
        assert!(n >= 4000, "{n} values");
        assert_eq!(parse_device_memory(None), Ok(DEFAULT_DEVICE_MEMORY));
        // The largest value accepted is a capacity the account handles without overflow.
        let most = parse_device_memory(Some("18446744073709551615")).unwrap();
        let account = MemoryAccount::new(DeviceId::Cuda(0), most);
        account.reserve(most).unwrap();
        assert!(account.reserve(1).is_err());
        account.release(most);
    }

    #[test]
    fn host_cache_caps_never_panic_and_name_the_variable_when_refused() {
        let values = env_fuzz::values(0x4341_4348, &["2147483648", "0", "4096"], env_fuzz::CASES);
        let n = env_fuzz::run("LOCUS_HOST_CACHE", &values, |v| match cache::parse_cap(Some(v)) {
            Ok(cap) => assert_eq!(cap.map(|c| c as u128), integer(v), "`{v}`"),
            Err(e) => {
                assert!(integer(v).is_none_or(|n| n > usize::MAX as u128), "`{v}` refused: {e}");
                env_fuzz::assert_clear(&e, "LOCUS_HOST_CACHE", v, &["number of bytes"]);
            }
        });
        assert!(n >= 4000, "{n} values");
        assert_eq!(cache::parse_cap(None), Ok(None));
    }
}
