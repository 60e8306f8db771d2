//! The one error type of locus.

use crate::device::DeviceId;

/// `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in locus. Each variant names the device and the op, and
/// its message says what to do about it.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{DeviceId, Error};
/// let e = Error::DeviceMismatch { op: "add", lhs: DeviceId::Cuda(0), rhs: DeviceId::Cuda(1) };
/// assert_eq!(e.to_string(), "add: lhs is on cuda:0 but rhs is on cuda:1; move one with .to(..) or .to_dyn(..) first");
/// ```
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A CUDA ordinal at or beyond the device count.
    #[error("no such device cuda:{ordinal}: {count} device(s) available (ordinals 0..{count})")]
    NoSuchDevice { ordinal: u32, count: usize },

    /// Two operands of a run-time-checked op live on different placements.
    #[error("{op}: lhs is on {lhs} but rhs is on {rhs}; move one with .to(..) or .to_dyn(..) first")]
    DeviceMismatch { op: &'static str, lhs: DeviceId, rhs: DeviceId },

    /// A checked conversion to a placement the tensor is not on (`try_into_device`).
    #[error("the tensor is on {actual}, not {expected}; copy it with .to(..) or .to_dyn({expected}) to move it")]
    NotOnDevice { expected: DeviceId, actual: DeviceId },

    /// Operand shapes that the op cannot combine.
    #[error("{op}: shapes {lhs:?} and {rhs:?} do not fit together")]
    ShapeMismatch { op: &'static str, lhs: Vec<usize>, rhs: Vec<usize> },

    /// An argument the op cannot take (bad dim, zero step, wrong element count, ...).
    #[error("{op}: {reason}")]
    InvalidArgument { op: &'static str, reason: String },

    /// An allocation larger than the device has free.
    #[error("out of memory on {device}: requested {requested} bytes, {free} bytes free")]
    OutOfMemory { device: DeviceId, requested: usize, free: usize },

    /// A driver call that failed.
    #[error("{call} failed on {device}: {code}")]
    Driver { device: DeviceId, call: &'static str, code: String },

    /// A kernel that failed to compile, load or launch.
    #[error("kernel `{name}` on {device}: {message}")]
    Kernel { device: DeviceId, name: String, message: String },

    /// No backend could be set up.
    #[error("no backend: {reason} (LOCUS_BACKEND is `{requested}`; use `auto`, `cuda` or `host`)")]
    NoBackend { requested: String, reason: String },

    /// A device name that does not parse.
    #[error("`{input}` is not a device: {reason}")]
    ParseDevice { input: String, reason: String },

    /// A data-loader worker failed while producing a batch.
    #[error("loader worker failed on batch {batch}: {message}")]
    LoaderWorker { batch: usize, message: String },

    /// Two devices that cannot read each other's memory directly.
    #[error("{lhs} and {rhs} have no peer-to-peer path; copy with .to(..), which stages through the host")]
    NoPeerAccess { lhs: DeviceId, rhs: DeviceId },

    /// The replica of a data-parallel module on `device` failed.
    #[error("replica on {device} failed: {source}")]
    Replica { device: DeviceId, source: Box<Error> },

    /// Code run on a worker thread panicked; the panic was caught and the thread joined.
    #[error("panicked: {message}")]
    Panicked { message: String },

    /// The operating system refused to start a worker thread.
    #[error("could not start a thread: {message}")]
    Thread { message: String },
}

/// The message of a caught panic's payload, as the default hook prints it.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_string()))
        .unwrap_or_else(|| "a non-string panic payload".into())
}
