//! Errors worded the same on every backend.

use crate::error::Error;

/// The error of `elapsed` on events that were not both recorded and completed, worded the
/// same on every backend (the driver says `CUDA_ERROR_NOT_READY` or `…_INVALID_HANDLE`).
pub(crate) fn events_not_complete() -> Error {
    Error::InvalidArgument { op: "elapsed", reason: "both events must be recorded and completed first".into() }
}
