//! The one error type of locus.

use crate::device_id::DeviceId;

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
    NoSuchDevice {
        /// The ordinal asked for.
        ordinal: u32,
        /// How many devices there are.
        count: usize,
    },

    /// A role ([`Role`](crate::Role)) used before it is bound, bound twice, or bound to
    /// a device that does not exist.
    #[error("role `{role}`: {reason}")]
    Role {
        /// The role's name.
        role: &'static str,
        /// What is wrong, and what to do.
        reason: String,
    },

    /// Two operands of a run-time-checked op live on different placements.
    #[error("{op}: lhs is on {lhs} but rhs is on {rhs}; move one with .to(..) or .to_dyn(..) first")]
    DeviceMismatch {
        /// The op.
        op: &'static str,
        /// Where the left operand is.
        lhs: DeviceId,
        /// Where the right operand is.
        rhs: DeviceId,
    },

    /// An op on one device inside [`on_stream`](crate::on_stream) with a stream of another:
    /// `on_stream` makes a stream current for its own device only, so the op would run on
    /// its device's default stream, not the one the caller made current.
    #[error(
        "{op} on {device} inside on_stream of a {stream} stream would run on {device}'s default stream, \
         not that stream: make a stream of {device} current too (an on_stream of it inside this one), \
         or copy the data to {stream} with .to(..) first"
    )]
    StreamOfOtherDevice {
        /// The op.
        op: &'static str,
        /// The device the op runs on.
        device: DeviceId,
        /// The device of the stream `on_stream` made current.
        stream: DeviceId,
    },

    /// A checked conversion to a placement the tensor is not on (`try_into_device`).
    #[error("the tensor is on {actual}, not {expected}; copy it with .to(..) or .to_dyn({expected}) to move it")]
    NotOnDevice {
        /// The placement asked for.
        expected: DeviceId,
        /// Where the tensor is.
        actual: DeviceId,
    },

    /// Operand shapes that the op cannot combine.
    #[error("{op}: shapes {lhs:?} and {rhs:?} do not fit together")]
    ShapeMismatch {
        /// The op.
        op: &'static str,
        /// The left operand's shape.
        lhs: Vec<usize>,
        /// The right operand's shape.
        rhs: Vec<usize>,
    },

    /// A multi-process job went wrong: a launch variable, the store, a peer process.
    #[error("dist::{op}: {reason}")]
    Dist {
        /// The call that failed (`init`, `store.get`, `all_reduce`, ...).
        op: &'static str,
        /// What went wrong, naming the variable, address or rank involved.
        reason: String,
    },

    /// Work that a graph capture cannot record, refused before it reaches the driver.
    #[error("`{op}` cannot be captured in a graph: {reason}")]
    NotCapturable {
        /// The op, as the user called it.
        op: &'static str,
        /// Why, and what to do instead.
        reason: String,
    },

    /// An argument the op cannot take (bad dim, zero step, wrong element count, ...).
    #[error("{op}: {reason}")]
    InvalidArgument {
        /// The op (the function the user called).
        op: &'static str,
        /// What is wrong, and how to fix it.
        reason: String,
    },

    /// An allocation larger than the device has free.
    #[error("out of memory on {device}: requested {requested} bytes, {free} bytes free; {report}")]
    OutOfMemory {
        /// The device (or `cpu`/`pinned`).
        device: DeviceId,
        /// Bytes asked for.
        requested: usize,
        /// Bytes free, as far as known (0 when unknown).
        free: usize,
        /// What is allocated and reserved, the largest cached block and where the memory
        /// went (the top allocation sites with `LOCUS_MEMORY_HISTORY=1`), and the snapshot
        /// written for `LOCUS_OOM_SNAPSHOT`.
        report: String,
    },

    /// A driver call that failed.
    #[error("{call} failed on {device}: {code}")]
    Driver {
        /// The device the call ran for.
        device: DeviceId,
        /// The driver call, e.g. `cuMemcpyHtoDAsync`.
        call: &'static str,
        /// The driver's error name.
        code: String,
    },

    /// A kernel that failed to compile, load or launch.
    #[error("kernel `{name}` on {device}: {message}")]
    Kernel {
        /// The device.
        device: DeviceId,
        /// The kernel, or the source file or library call.
        name: String,
        /// What the compiler, loader or library said.
        message: String,
    },

    /// A kernel of `#[locus::kernel]` launched on the host backend, which cannot run CUDA C,
    /// without a Rust fallback.
    #[error(
        "kernel `{kernel}` has no host fallback: the host backend cannot run CUDA C; give it one with \
         `#[locus::kernel(.., host = path::to::fn)]`, or run on a GPU (LOCUS_BACKEND=cuda)"
    )]
    NoHostKernel {
        /// The kernel's name.
        kernel: String,
    },

    /// No backend could be set up.
    #[error("no backend: {reason} (LOCUS_BACKEND is `{requested}`; use `auto`, `cuda` or `host`)")]
    NoBackend {
        /// The value of `LOCUS_BACKEND` (`auto` when unset).
        requested: String,
        /// Why no backend could be set up.
        reason: String,
    },

    /// A device name that does not parse.
    #[error("`{input}` is not a device: {reason}")]
    ParseDevice {
        /// The text that was parsed.
        input: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A checkpoint file that cannot be read or written as a whole: missing, unreadable,
    /// not a safetensors file, a header that does not parse.
    #[error("{op} `{path}`: {reason}")]
    Checkpoint {
        /// The function the user called (`load_safetensors`, `save_safetensors`, ...).
        op: &'static str,
        /// The file.
        path: String,
        /// What is wrong, and what to do about it.
        reason: String,
    },

    /// One tensor of a checkpoint that cannot be loaded, saved or handed out: a dtype
    /// locus does not have, a shape that does not match its bytes, data past the end of
    /// a truncated file, the wrong element type asked for.
    #[error("{op} `{path}`: tensor `{tensor}` {reason}")]
    CheckpointTensor {
        /// The function the user called.
        op: &'static str,
        /// The file.
        path: String,
        /// The tensor's name.
        tensor: String,
        /// What is wrong with it, and what to do about it.
        reason: String,
    },

    /// A data-loader worker failed while producing a batch.
    #[error("loader worker failed on batch {batch}: {message}")]
    LoaderWorker {
        /// The batch that failed.
        batch: usize,
        /// The worker's error or panic message.
        message: String,
    },

    /// Two devices that cannot read each other's memory directly.
    #[error("{lhs} and {rhs} have no peer-to-peer path; copy with .to(..), which stages through the host")]
    NoPeerAccess {
        /// One device.
        lhs: DeviceId,
        /// The other device.
        rhs: DeviceId,
    },

    /// The replica of a data-parallel module on `device` failed.
    #[error("replica on {device} failed: {source}")]
    Replica {
        /// The replica's device.
        device: DeviceId,
        /// What went wrong there.
        source: Box<Error>,
    },

    /// Code run on a worker thread panicked; the panic was caught and the thread joined.
    #[error("panicked: {message}")]
    Panicked {
        /// The panic's message.
        message: String,
    },

    /// A backward pass that cannot run: no tape, a tape freed by an earlier pass, a value
    /// written in place after an op read it.
    #[error("backward: {reason}")]
    Backward {
        /// What is wrong, and what to do about it.
        reason: String,
    },

    /// The operating system refused to start a worker thread.
    #[error("could not start a thread: {message}")]
    Thread {
        /// The operating system's error.
        message: String,
    },
}

/// The message of a caught panic's payload, as the default hook prints it.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_string()))
        .unwrap_or_else(|| "a non-string panic payload".into())
}
