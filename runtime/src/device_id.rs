//! [`DeviceId`], the run-time name of a device: part of the foundation, so that the
//! backend can name devices without importing the placement types above it.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// A run-time device name: `cpu`, `pinned` or `cuda:N`.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::DeviceId;
/// let id: DeviceId = "cuda:1".parse().unwrap();
/// assert_eq!(id, DeviceId::Cuda(1));
/// assert_eq!(id.to_string(), "cuda:1");
/// assert!("gpu1".parse::<DeviceId>().is_err());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DeviceId {
    /// Pageable host memory.
    Cpu,
    /// Page-locked host memory.
    Pinned,
    /// The CUDA device with this ordinal.
    Cuda(u32),
}

impl DeviceId {
    /// True for `cpu` and `pinned`: memory the host can read directly.
    pub fn is_host(self) -> bool {
        matches!(self, DeviceId::Cpu | DeviceId::Pinned)
    }

    /// The CUDA ordinal, if this is a CUDA device.
    pub fn ordinal(self) -> Option<u32> {
        match self {
            DeviceId::Cuda(n) => Some(n),
            _ => None,
        }
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceId::Cpu => f.write_str("cpu"),
            DeviceId::Pinned => f.write_str("pinned"),
            DeviceId::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl FromStr for DeviceId {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        let bad = |reason: &str| Error::ParseDevice { input: s.to_string(), reason: reason.to_string() };
        // Strict, as `torch.device` is: "cuda:0 " is a typo somewhere, not a device.
        if s.trim() != s {
            return Err(bad("remove the spaces around the name, as in `cuda:0`"));
        }
        let t = s;
        match t {
            "cpu" => return Ok(DeviceId::Cpu),
            "pinned" => return Ok(DeviceId::Pinned),
            "cuda" => return Err(bad("give the ordinal too, as in `cuda:0`")),
            _ => {}
        }
        let Some(rest) = t.strip_prefix("cuda:") else {
            return Err(bad("expected `cpu`, `pinned` or `cuda:N`"));
        };
        if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("the ordinal after `cuda:` must be a non-negative integer"));
        }
        rest.parse::<u32>().map(DeviceId::Cuda).map_err(|_| bad("the ordinal is too large"))
    }
}
