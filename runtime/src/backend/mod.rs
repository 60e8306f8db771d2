//! The one backend trait, and the choice of backend for the process.
//!
//! Ops above this module see only [`Backend`] and [`Buffer`]; the host simulation and
//! the CUDA implementation live behind it. Host placements (`cpu`, `pinned`) always run
//! on the host implementation; `cuda:N` runs on the backend chosen by `LOCUS_BACKEND`.

mod account;
pub(crate) mod copy_threads;
mod cuda;
pub(crate) mod current_stream;
pub(crate) mod hazard;
pub(crate) mod host;
mod host_collective;
mod host_kernels;
mod huge_pages;
pub(crate) mod ordering;
pub(crate) mod pinned_pool;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use crate::device_id::DeviceId;
use crate::element::{DType, Scalar};
use crate::error::{Error, Result};
use crate::shape::{Layout, Reduction};

pub(crate) use host::HostBuffer;

/// Device memory of one backend.
#[derive(Debug)]
pub(crate) enum Buffer {
    Host(HostBuffer),
    Cuda(cuda::CudaBuffer),
}

/// A stream of one backend: a simulated stream (a queue with its own worker) on the
/// host, a reference-counted driver stream on CUDA.
#[derive(Clone, Debug)]
pub(crate) enum RawStream {
    Host(Arc<host::HostStream>),
    Cuda(Arc<cuda::StreamObj>),
}

impl RawStream {
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

/// An elementwise op of one operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UnaryOp {
    Neg,
    Relu,
    Exp,
    Sqrt,
    Abs,
    Square,
}

impl UnaryOp {
    pub(crate) fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Relu => "relu",
            UnaryOp::Exp => "exp",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Abs => "abs",
            UnaryOp::Square => "square",
        }
    }
}

/// The one check (and message) both backends make for ops defined on float types only.
/// The typed API cannot reach them with another type; the check keeps a bad call an
/// error, worded the same on every backend.
pub(crate) fn float_only(op: &'static str, dtype: DType) -> Result<()> {
    if dtype.is_float() {
        Ok(())
    } else {
        Err(Error::InvalidArgument { op, reason: format!("needs a float type, not {dtype}") })
    }
}

/// An elementwise op of one operand with scalar parameters (of the operand's dtype).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum ParamOp {
    /// `x^e`, float types only.
    Pow(Scalar),
    /// `x` limited to `[lo, hi]`; NaN stays NaN.
    Clamp(Scalar, Scalar),
}

/// One strided copy into a new buffer: `count` blocks of `block` elements, block `i`
/// read from `src` at `src_offset + i * src_stride` and written at `dst_offset + i *
/// dst_stride`. For a row-major tensor this is narrowing, or placing a part of a
/// concatenation, along any dim: blocks are the contiguous runs below that dim.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Blocks<'a> {
    pub src: &'a Buffer,
    pub src_offset: usize,
    pub src_stride: usize,
    pub dst_offset: usize,
    pub dst_stride: usize,
    pub count: usize,
    pub block: usize,
}

/// An elementwise op of two operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
}

impl BinaryOp {
    pub(crate) fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
        }
    }
}

/// A reduction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReduceOp {
    Sum,
    Mean,
    Max,
}

/// A collective over one buffer per device, as NCCL runs them. Inputs hold `len`
/// elements each; input `i` lives on `devices[i]`.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Collective<'a> {
    /// Every device gets a copy of `buf`, which lives on `devices[root]`.
    Broadcast { root: usize, buf: &'a Buffer },
    /// Every device gets the elementwise sum of the inputs.
    AllReduceSum(&'a [&'a Buffer]),
    /// Every device gets the inputs one after another, in device-list order.
    AllGather(&'a [&'a Buffer]),
}

/// What a backend does. Every method gets the device it runs on; buffers passed in
/// belong to that device. Element counts and shapes have been checked by the caller.
pub(crate) trait Backend: Send + Sync + 'static {
    /// `host` or `cuda`.
    fn name(&self) -> &'static str;
    /// The number of CUDA devices this backend drives.
    fn device_count(&self) -> usize;

    /// Bytes held on `device` by live buffers, and their high-water mark.
    fn memory(&self, device: DeviceId) -> Result<(usize, usize)>;
    /// Restarts the high-water mark of `device` from what is held now.
    fn reset_peak(&self, device: DeviceId) -> Result<()>;
    /// Bytes of freed memory cached on `device` for reuse.
    fn cached_bytes(&self, device: DeviceId) -> Result<usize>;
    /// Stream objects this backend holds now.
    fn live_streams(&self) -> usize;

    /// The stream ops use on `device` when no other is made current.
    fn default_stream(&self, device: DeviceId) -> Result<RawStream>;
    /// A new stream on `device`.
    fn new_stream(&self, device: DeviceId) -> Result<RawStream>;
    /// Waits on the host for everything queued on `stream`.
    fn sync_stream(&self, stream: &RawStream) -> Result<()>;
    /// Waits on the host for all work on `device`.
    fn sync_device(&self, device: DeviceId) -> Result<()>;
    /// A new event on `device`; `timing` events can measure elapsed time.
    fn new_event(&self, device: DeviceId, timing: bool) -> Result<RawEvent>;
    /// Records `event` at the current end of `stream`.
    fn record_event(&self, event: &RawEvent, stream: &RawStream) -> Result<()>;
    /// Makes `stream` wait (on the device) for `event`.
    fn wait_event(&self, stream: &RawStream, event: &RawEvent) -> Result<()>;
    /// Waits on the host for `event`.
    fn sync_event(&self, event: &RawEvent) -> Result<()>;
    /// Whether the work before `event` has finished.
    fn event_done(&self, event: &RawEvent) -> Result<bool>;
    /// Milliseconds between two completed events.
    fn elapsed_ms(&self, start: &RawEvent, end: &RawEvent) -> Result<f32>;
    /// Marks `buf` as used on `stream` (PyTorch's `record_stream`): `stream` first
    /// waits for the buffer's writer, and the buffer is freed only after `stream` is done.
    fn use_on(&self, buf: &Buffer, stream: &RawStream) -> Result<()>;

    /// `bytes` bytes of page-locked host memory (the pinned pool's source).
    fn alloc_pinned(&self, bytes: usize) -> Result<usize>;
    /// Frees memory from [`Backend::alloc_pinned`].
    ///
    /// # Safety
    /// `ptr` and `bytes` come from one `alloc_pinned` call and nothing uses the memory.
    unsafe fn free_pinned(&self, ptr: usize, bytes: usize);

    /// A copy of pinned `src` on `device`, queued on `stream`; the event marks its end.
    /// `src` is held from reuse by the pinned pool until then.
    fn upload_async(&self, device: DeviceId, src: &HostBuffer, stream: &RawStream) -> Result<(Buffer, RawEvent)>;
    /// Queues a copy of `src` (on `device`) into pinned `dst` on `stream`; the event marks
    /// its end, and `dst` is held from reuse until then.
    fn download_async(
        &self,
        device: DeviceId,
        src: &Buffer,
        dst: &mut HostBuffer,
        stream: &RawStream,
    ) -> Result<RawEvent>;
    /// Makes `device` current for the calling thread (the CUDA context); called by the guard only when the current device changes.
    fn make_current(&self, device: DeviceId) -> Result<()>;

    /// A buffer of `bytes` bytes holding a copy of `data`.
    fn upload(&self, device: DeviceId, data: &[u8]) -> Result<Buffer>;
    /// Copies all of `buf` into `out` (same length).
    fn download(&self, device: DeviceId, buf: &Buffer, out: &mut [u8]) -> Result<()>;
    /// A copy of `buf` (on `src`) on `dst`, both devices of this backend.
    fn copy(&self, src: DeviceId, buf: &Buffer, dst: DeviceId) -> Result<Buffer>;

    /// `len` elements equal to `value`.
    fn fill(&self, device: DeviceId, dtype: DType, len: usize, value: Scalar) -> Result<Buffer>;
    /// `start + i * step` for i in 0..len, computed in f64 and converted.
    fn arange(&self, device: DeviceId, dtype: DType, len: usize, start: f64, step: f64) -> Result<Buffer>;
    /// Uniform `[0, 1)` values; element i depends only on `seed` and i (see [`rand_bits`]).
    fn rand(&self, device: DeviceId, dtype: DType, len: usize, seed: u64) -> Result<Buffer>;

    fn unary(&self, device: DeviceId, op: UnaryOp, dtype: DType, x: &Buffer, len: usize) -> Result<Buffer>;
    #[allow(clippy::too_many_arguments)]
    fn binary(
        &self,
        device: DeviceId,
        op: BinaryOp,
        dtype: DType,
        lhs: &Buffer,
        rhs: &Buffer,
        out_shape: &[usize],
        layout: &Layout,
    ) -> Result<Buffer>;
    fn binary_scalar(
        &self,
        device: DeviceId,
        op: BinaryOp,
        dtype: DType,
        lhs: &Buffer,
        len: usize,
        rhs: Scalar,
    ) -> Result<Buffer>;
    /// `lhs op rhs[i]` for each of the `len` elements of `rhs` (a scalar on the left).
    fn scalar_binary(
        &self,
        device: DeviceId,
        op: BinaryOp,
        dtype: DType,
        lhs: Scalar,
        rhs: &Buffer,
        len: usize,
    ) -> Result<Buffer>;
    /// `op` on each of the `len` elements of `x`; the parameters have type `dtype`.
    fn unary_param(&self, device: DeviceId, op: ParamOp, dtype: DType, x: &Buffer, len: usize) -> Result<Buffer>;
    fn reduce(&self, device: DeviceId, op: ReduceOp, dtype: DType, x: &Buffer, r: Reduction) -> Result<Buffer>;
    /// `[m, k] x [k, n]`, row-major.
    #[allow(clippy::too_many_arguments)]
    fn matmul(
        &self,
        device: DeviceId,
        dtype: DType,
        a: &Buffer,
        b: &Buffer,
        m: usize,
        k: usize,
        n: usize,
    ) -> Result<Buffer>;
    /// The transpose of a row-major `[rows, cols]` matrix.
    fn transpose(&self, device: DeviceId, dtype: DType, x: &Buffer, rows: usize, cols: usize) -> Result<Buffer>;
    /// The buffers one after another (`lens[i]` elements of `parts[i]`).
    fn concat(&self, device: DeviceId, dtype: DType, parts: &[(&Buffer, usize)]) -> Result<Buffer>;
    /// Elements `offset..offset + len` of `x`.
    fn slice(&self, device: DeviceId, dtype: DType, x: &Buffer, offset: usize, len: usize) -> Result<Buffer>;
    /// A new buffer of `len` elements written by `parts` (every block in range, and
    /// together covering all `len` elements).
    fn copy_blocks(&self, device: DeviceId, dtype: DType, len: usize, parts: &[Blocks<'_>]) -> Result<Buffer>;

    // Multi-device work: peer access and collectives.

    /// Whether `device` can read and write the memory of `peer` directly (two distinct
    /// devices of this backend).
    fn can_access_peer(&self, device: DeviceId, peer: DeviceId) -> Result<bool>;
    /// Lets `device` and `peer` access each other's memory; already enabled is success.
    fn enable_peer_access(&self, device: DeviceId, peer: DeviceId) -> Result<()>;
    /// Runs `op` over `devices` (distinct devices of this backend, at least two), `len`
    /// elements of `dtype` per input; one output per device, in order. `None` when the
    /// backend has no direct way (no NCCL), and the caller copies instead.
    fn collective(
        &self,
        devices: &[DeviceId],
        dtype: DType,
        len: usize,
        op: Collective<'_>,
    ) -> Result<Option<Vec<Buffer>>>;
}

/// The error for a buffer of one backend handed to the other (a bug above the backend,
/// reported as an error rather than a panic).
pub(crate) fn wrong_buffer(backend: &str, memory: &str) -> Error {
    Error::InvalidArgument { op: "backend", reason: format!("the {backend} backend was handed {memory} memory") }
}

/// The error of `elapsed` on events that were not both recorded and completed, worded the
/// same on every backend (the driver says `CUDA_ERROR_NOT_READY` or `…_INVALID_HANDLE`).
pub(crate) fn events_not_complete() -> Error {
    Error::InvalidArgument { op: "elapsed", reason: "both events must be recorded and completed first".into() }
}

/// The random bits of element `i` under `seed` (SplitMix64 of a counter), shared by all
/// backends so that `rand` gives the same values everywhere.
pub(crate) fn rand_bits(seed: u64, i: u64) -> u64 {
    let mut z = seed.wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

static SELECTED: OnceLock<Result<&'static dyn Backend>> = OnceLock::new();

/// The backend chosen by `LOCUS_BACKEND` (`auto` when unset), set up on first use.
pub(crate) fn selected() -> Result<&'static dyn Backend> {
    SELECTED.get_or_init(choose).clone()
}

fn choose() -> Result<&'static dyn Backend> {
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

/// The backend that runs ops on `device`, after checking that the device exists.
pub(crate) fn for_device(device: DeviceId) -> Result<&'static dyn Backend> {
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
pub(crate) fn same(a: &dyn Backend, b: &dyn Backend) -> bool {
    std::ptr::addr_eq(a as *const dyn Backend, b as *const dyn Backend)
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
