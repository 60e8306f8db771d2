//! The two backend traits, split as candle splits `BackendDevice` and `BackendStorage`.
//!
//! [`BackendDevice`] is what a backend does for a device it is given by name: streams,
//! events, memory statistics, pinned host memory, making a device current, peer access,
//! collectives, and every op that makes a buffer from nothing or from elsewhere (upload,
//! copy, fill, arange, rand). One object per backend.
//!
//! [`BackendStorage`] is what a buffer does: it knows its device, so its ops take no
//! device and put their result on that device, queued on the thread's current stream
//! there.
//!
//! Both name their backend's own types (`Stream`, `Event`, `Graph`, `Comm`, `Storage`), as
//! candle's and wgpu-hal's traits do: a backend is never handed another's stream or
//! memory, so none checks. The enum layer above (`dispatch/`) matches the variants once,
//! picks the backend and applies the rules both share (a pinned block held until its
//! copy's event, the capture gate), so they are written once.
//!
//! Callers check element counts, shapes and devices before calling either trait; the
//! backends check only what they alone can know (float-only ops, through
//! [`crate::backend::float_only`]; integer division by zero; limits of a kernel or library).

use std::fmt::Debug;
use std::time::Duration;

use crate::backend::api::fence::Fence;
use crate::backend::api::user_kernel::{Grid, KernelArg, KernelSource};
use crate::backend::{
    BinaryOp, Blocks, Collective, CommOp, CompareOp, Dist, Gather, Gemm, Norm, NormGrads, ParamOp, Permute, ReduceKind,
    Release, SoftmaxOp, UnaryOp,
};
use crate::device_id::DeviceId;
use crate::element::{DType, Scalar};
use crate::error::Result;
use crate::shape::{Layout, Reduction};

/// Page-locked host memory (the host backend's pinned buffers, on every backend) that an
/// asynchronous copy reads or writes by DMA after the call that queues it returns.
pub(crate) trait PinnedMemory {
    /// Its length in bytes.
    fn len(&self) -> usize;
    /// Its bytes, for the DMA to read.
    fn bytes(&self) -> &[u8];
    /// Its bytes, for the DMA to write.
    fn bytes_mut(&mut self) -> &mut [u8];
    /// Never written by the host nor reused again: for memory a copy may still use
    /// whose end cannot be observed.
    fn retire(&self);
}

/// Device-level work of one backend: every method names the device it acts on, or takes
/// a stream or event, which knows its own.
pub(crate) trait BackendDevice: Send + Sync + 'static {
    /// A stream of this backend.
    type Stream: Clone + Debug + Send + Sync + 'static;
    /// An event of this backend; the host can ask whether it completed.
    type Event: Clone + Debug + Send + Sync + Fence + 'static;
    /// A captured graph, ready to replay.
    type Graph: Debug + Send + Sync + 'static;
    /// A communicator between processes.
    type Comm: Debug + Send + Sync + 'static;
    /// Page-locked host memory, which asynchronous copies read and write.
    type Pinned: PinnedMemory;
    /// Memory of this backend.
    type Storage: BackendStorage<Stream = Self::Stream, Event = Self::Event, Pinned = Self::Pinned>;

    /// `host` or `cuda`.
    fn name(&self) -> &'static str;
    /// The number of CUDA devices this backend drives.
    fn device_count(&self) -> usize;
    /// Makes `device` current for the calling thread (the CUDA context); called by the
    /// guard only when the current device changes.
    fn make_current(&self, device: DeviceId) -> Result<()>;

    /// Bytes held on `device` by live buffers, and their high-water mark.
    fn memory(&self, device: DeviceId) -> Result<(usize, usize)>;
    /// Restarts the high-water mark of `device` from what is held now.
    fn reset_peak(&self, device: DeviceId) -> Result<()>;
    /// Bytes of freed memory cached on `device` for reuse.
    fn cached_bytes(&self, device: DeviceId) -> Result<usize>;
    /// Stream objects this backend holds now.
    fn live_streams(&self) -> usize;

    /// The stream ops use on `device` when no other is made current.
    fn default_stream(&self, device: DeviceId) -> Result<Self::Stream>;
    /// A new stream on `device`.
    fn new_stream(&self, device: DeviceId) -> Result<Self::Stream>;
    /// Waits on the host for everything queued on `stream`.
    fn sync_stream(&self, stream: &Self::Stream) -> Result<()>;
    /// Waits on the host for all work on `device`.
    fn sync_device(&self, device: DeviceId) -> Result<()>;
    /// A new event on `device`; `timing` events can measure elapsed time.
    fn new_event(&self, device: DeviceId, timing: bool) -> Result<Self::Event>;
    /// Records `event` at the current end of `stream`.
    fn record_event(&self, event: &Self::Event, stream: &Self::Stream) -> Result<()>;
    /// Makes `stream` wait (on the device) for `event`.
    fn wait_event(&self, stream: &Self::Stream, event: &Self::Event) -> Result<()>;
    /// Waits on the host for `event`.
    fn sync_event(&self, event: &Self::Event) -> Result<()>;
    /// Whether the work before `event` has finished.
    fn event_done(&self, event: &Self::Event) -> Result<bool>;
    /// Milliseconds between two completed events.
    fn elapsed_ms(&self, start: &Self::Event, end: &Self::Event) -> Result<f32>;

    /// `bytes` bytes of page-locked host memory (the pinned pool's source).
    fn alloc_pinned(&self, bytes: usize) -> Result<usize>;
    /// Frees memory from [`BackendDevice::alloc_pinned`].
    ///
    /// # Safety
    /// `ptr` and `bytes` come from one `alloc_pinned` call and nothing uses the memory.
    unsafe fn free_pinned(&self, ptr: usize, bytes: usize);

    /// A buffer on `device` holding a copy of `data` (read before this returns).
    fn upload(&self, device: DeviceId, data: &[u8]) -> Result<Self::Storage>;
    /// A copy of pinned `src` on `device`, queued on `stream`; the event marks its end.
    /// The caller (dispatch) holds `src` from reuse by the pinned pool until then.
    fn upload_async(
        &self,
        device: DeviceId,
        src: &Self::Pinned,
        stream: &Self::Stream,
    ) -> Result<(Self::Storage, Self::Event)>;
    /// One buffer on `device` per part, each a copy of its part (read before this
    /// returns), queued on the current stream of `device`. A backend with a faster way
    /// for many parts at once (one staged pass over all of them) overrides this.
    fn upload_parts(&self, device: DeviceId, parts: &[&[u8]]) -> Result<Vec<Self::Storage>> {
        parts.iter().map(|p| self.upload(device, p)).collect()
    }
    /// Memory made outside locus, `bytes` bytes at `addr` on `device`, as a buffer whose
    /// last write is the work queued on `stream` so far. `release` runs once every use
    /// of the buffer is over (or never, when that cannot be known); on `Err` it has run
    /// after `stream`'s work (or never).
    ///
    /// # Safety
    /// `addr .. addr + bytes` is memory of `device` (host memory on the host backend)
    /// that stays valid until `release` runs and that nothing but this buffer uses
    /// meanwhile, except work queued on `stream` before this call.
    unsafe fn wrap(
        &self,
        device: DeviceId,
        addr: u64,
        bytes: usize,
        stream: &Self::Stream,
        release: Release,
    ) -> Result<Self::Storage>;
    /// A copy of `src`, a buffer of this backend on any of its devices, on `device`.
    fn copy(&self, src: &Self::Storage, device: DeviceId) -> Result<Self::Storage>;
    /// `len` elements equal to `value`.
    fn fill(&self, device: DeviceId, dtype: DType, len: usize, value: Scalar) -> Result<Self::Storage>;
    /// `start + i * step` for i in 0..len, computed in f64 and converted.
    fn arange(&self, device: DeviceId, dtype: DType, len: usize, start: f64, step: f64) -> Result<Self::Storage>;
    /// Random values of a float `dtype` drawn from `dist`: uniform in `[0, 1)` or standard
    /// normal; element i depends only on `seed` and i (see [`crate::backend::rand_bits`]
    /// and [`crate::backend::normal`]).
    fn rand(&self, device: DeviceId, dtype: DType, len: usize, seed: u64, dist: Dist) -> Result<Self::Storage>;

    /// Whether `device` can read and write the memory of `peer` directly. The two are
    /// distinct devices of this backend: `parallel::peer` checks that, once.
    fn can_access_peer(&self, device: DeviceId, peer: DeviceId) -> Result<bool>;
    /// Lets `device` and `peer` (distinct, as above) access each other's memory; already
    /// enabled is success.
    fn enable_peer_access(&self, device: DeviceId, peer: DeviceId) -> Result<()>;
    /// Runs `op` over `devices` (distinct devices of this backend, at least two:
    /// `parallel::collective` checks that, once), `len` elements of `dtype` per input;
    /// one output per device, in order. `None` when the backend has no direct way (no
    /// NCCL), and the caller copies instead.
    fn collective(
        &self,
        devices: &[DeviceId],
        dtype: DType,
        len: usize,
        op: Collective<'_, Self::Storage>,
    ) -> Result<Option<Vec<Self::Storage>>>;

    /// Whether this backend runs collectives between processes on `device` itself (NCCL
    /// is loaded): `false` moves them through host memory (`dist`'s TCP path).
    fn has_process_comm(&self, device: DeviceId) -> bool;
    /// A new communicator id (NCCL's unique id) that rank 0 shares with the others.
    fn new_comm_id(&self) -> Result<Vec<u8>>;
    /// Joins communicator `id` as `rank` of `world` ranks on `device`; returns once every
    /// rank has joined. A collective on it that has not finished `timeout` after it was
    /// queued aborts the communicator (a peer died or hangs): later calls are an `Err`.
    fn join_comm(
        &self,
        device: DeviceId,
        id: &[u8],
        rank: usize,
        world: usize,
        timeout: Duration,
    ) -> Result<Self::Comm>;
    /// Queues `op` over `comm` on the thread's current stream of the comm's device (the
    /// inputs are waited for there, as any op's); `len` elements of `dtype` per input.
    /// The result, or `None` for a send.
    fn run_comm(
        &self,
        comm: &Self::Comm,
        dtype: DType,
        len: usize,
        op: CommOp<'_, Self::Storage>,
    ) -> Result<Option<Self::Storage>>;

    /// Starts capturing the work queued on `stream` into a graph instead of running it.
    /// Captured work may read memory made during the capture, and `inputs`, only.
    fn begin_capture(&self, stream: &Self::Stream, inputs: &[&Self::Storage]) -> Result<()>;
    /// Ends the capture begun on `stream`: its work, and that of the streams that joined
    /// it, as a graph ready to replay.
    fn end_capture(&self, stream: &Self::Stream) -> Result<Self::Graph>;
    /// Queues one replay of `graph` on `stream`. It reads `reads` (the inputs) and
    /// writes `writes` (the outputs made in the capture); the caller has ordered them for
    /// `stream` (`use_on_stream`, `before_write`) and marks the writes after.
    fn launch_graph(
        &self,
        graph: &Self::Graph,
        stream: &Self::Stream,
        reads: &[&Self::Storage],
        writes: &[&Self::Storage],
    ) -> Result<()>;

    /// Queues one launch of the user's `kernel` on `stream`, a stream of `device`, over
    /// `grid` (checked, not empty), with `args` in the kernel's parameter order: buffers
    /// of `device`, distinct for every `Write` (the tensor layer copies shared outputs
    /// first). Every buffer is used on `stream` (its writer first, its free after the
    /// launch); `Write` buffers are written in place (`before_write` before the launch,
    /// `after_write` after it). The host backend runs the kernel's Rust fallback as a job,
    /// or is `Error::NoHostKernel` without one.
    fn launch_kernel(
        &self,
        device: DeviceId,
        kernel: &'static KernelSource,
        stream: &Self::Stream,
        grid: Grid,
        args: &[KernelArg<'_, Self::Storage>],
    ) -> Result<()>;
}

/// Storage-level work: a buffer that knows its device. Each op makes a new buffer on the
/// device of its (first) operand, queued on the thread's current stream of that device;
/// operands of other streams are waited for first. `dtype` is the elements' type and
/// `len` an element count, both checked by the caller.
pub(crate) trait BackendStorage: Sized + Debug {
    /// The streams of this memory's backend.
    type Stream;
    /// The events of this memory's backend.
    type Event;
    /// Page-locked host memory, which asynchronous copies write.
    type Pinned;

    /// The device this memory lives on.
    fn device_id(&self) -> DeviceId;
    /// Copies all of this buffer into `out` (same length), waiting for it on the host.
    /// `out` may be uninitialized (a fresh `Vec`'s capacity): `Ok` means every byte of it
    /// was written.
    fn download(&self, out: &mut [std::mem::MaybeUninit<u8>]) -> Result<()>;
    /// Queues a copy of this buffer into pinned `dst` on `stream` (of this buffer's
    /// device); the event marks its end. The caller (dispatch) holds `dst` from reuse until then.
    fn download_async(&self, dst: &mut Self::Pinned, stream: &Self::Stream) -> Result<Self::Event>;
    /// Marks this buffer as used on `stream` (PyTorch's `record_stream`): `stream` first
    /// waits for the buffer's writer, and the buffer is freed only after `stream` is done.
    fn use_on_stream(&self, stream: &Self::Stream) -> Result<()>;
    /// Prepares this memory to be written in place on `stream`: `stream` waits for its
    /// last write and for every stream that read it since.
    fn before_write(&self, stream: &Self::Stream) -> Result<()>;
    /// This memory was just written in place by work queued on `stream`: later uses on
    /// other streams wait for that write.
    fn after_write(&self, stream: &Self::Stream) -> Result<()>;
    /// Lends this memory to code outside locus that reads it (or, with `write`, writes
    /// it) with work queued on `stream`, of this buffer's device: `stream` first waits
    /// for the last write (and for a write, for every read since), and the memory is
    /// freed only after `stream`'s work. Returns the address (a device address; a host
    /// address on the host backend, where the host first waits for `stream`, so that
    /// host code may stand for that work). A write ends with [`BackendStorage::after_write`].
    fn lend(&self, stream: &Self::Stream, write: bool) -> Result<u64>;
    /// Copies `src` (of the same length and device) over this memory, in place, queued
    /// on the thread's current stream of the device.
    fn overwrite(&self, src: &Self) -> Result<()>;
    /// Forgets the writes a capture queued (they never ran): the memory counts as
    /// unwritten until a replay writes it.
    fn forget_captured_writes(&self);

    /// `op` of each of the `len` elements.
    fn unary(&self, op: UnaryOp, dtype: DType, len: usize) -> Result<Self>;
    /// `grad[i] · op'(self[i])` for each of the `len` elements, float types only, for an
    /// `op` with a [`UnaryOp::grad_name`] (an `Err` for the others).
    fn activation_grad(&self, grad: &Self, op: UnaryOp, dtype: DType, len: usize) -> Result<Self>;
    /// Each of the `len` elements of `from` converted to `to` (as Rust's `as` does; to a
    /// 16-bit float type rounded once to nearest, ties to even).
    fn cast(&self, from: DType, to: DType, len: usize) -> Result<Self>;
    /// `op` of each of the `len` elements; the parameters have type `dtype`.
    fn unary_param(&self, op: ParamOp, dtype: DType, len: usize) -> Result<Self>;
    /// `self op rhs` into an `out_shape` result, the operands lined up by `layout`.
    fn binary(&self, rhs: &Self, op: BinaryOp, dtype: DType, out_shape: &[usize], layout: &Layout) -> Result<Self>;
    /// `self[i] op rhs` for each of the `len` elements.
    fn binary_scalar(&self, op: BinaryOp, dtype: DType, len: usize, rhs: Scalar) -> Result<Self>;
    /// `lhs op self[i]` for each of the `len` elements (a scalar on the left).
    fn scalar_binary(&self, op: BinaryOp, dtype: DType, lhs: Scalar, len: usize) -> Result<Self>;
    /// `op` over the dim `r` describes.
    fn reduce(&self, op: ReduceKind, dtype: DType, r: Reduction) -> Result<Self>;
    /// `self @ rhs`, row-major, of the shapes `g` gives.
    fn matmul(&self, rhs: &Self, dtype: DType, g: Gemm) -> Result<Self>;
    /// The transpose of a row-major `[rows, cols]` matrix.
    fn transpose(&self, dtype: DType, rows: usize, cols: usize) -> Result<Self>;
    /// A row-major copy with the dims in the order `p` describes (`p.len()` elements).
    fn permute(&self, dtype: DType, p: &Permute) -> Result<Self>;
    /// Elements `offset..offset + len`.
    fn slice(&self, dtype: DType, offset: usize, len: usize) -> Result<Self>;
    /// The parts one after another (`parts[i].1` elements of `parts[i].0`), on the first
    /// part's device; no parts is an error (there is no device to put them on).
    fn concat(dtype: DType, parts: &[(&Self, usize)]) -> Result<Self>;
    /// A new buffer of `len` elements on this buffer's device, written by `parts` (every
    /// block in range, no two overlapping), zeros where no part writes.
    fn copy_blocks(&self, dtype: DType, len: usize, parts: &[Blocks<'_, Self>]) -> Result<Self>;

    /// `op` (softmax or log-softmax, float types only) over the dim `r` describes; the
    /// result has this buffer's length. With `grad`, this buffer is `op`'s output and the
    /// result the gradient of its input, over the last dim only (`r.inner == 1`, else an
    /// `Err`): `y (g - Σ g y)`, or `g - exp(y) Σ g`.
    fn softmax(&self, grad: Option<&Self>, op: SoftmaxOp, dtype: DType, r: Reduction) -> Result<Self>;
    /// LayerNorm of each of `n.rows` rows of `n.len` elements (float types only):
    /// `(x - mean) / sqrt(var + eps)`, the variance biased, then with `affine` (weight and
    /// bias, `n.len` elements each, on this buffer's device) times the weight plus the
    /// bias. The result has this buffer's length.
    fn layer_norm(&self, affine: Option<(&Self, &Self)>, dtype: DType, n: Norm) -> Result<Self>;
    /// The gradients of [`layer_norm`](Self::layer_norm) at this buffer, given `grad` (the
    /// gradient of its output, of this buffer's length and device): with respect to this
    /// buffer, and, with the `weight` the forward used, with respect to the weight and the
    /// bias (`n.len` elements each: the sums over the rows of `grad · xhat` and of `grad`).
    fn layer_norm_back(&self, grad: &Self, weight: Option<&Self>, dtype: DType, n: Norm) -> Result<NormGrads<Self>>;
    /// The elements `index` (`g.count` i32 of this buffer's device) picks along the
    /// middle dim of `g`, as `g` lays them out (`g.out_len()` elements, which the caller
    /// has checked). An index out of `[0, g.size)` is an error (the first one, in order);
    /// the indices are checked even when the result is empty. Waits for the check.
    fn index_select(&self, index: &Self, dtype: DType, g: Gather) -> Result<Self>;
    /// The gradient of [`index_select`](Self::index_select) (float types), this buffer the
    /// gradient of its result (`g.out_len()` elements): `[g.outer, g.size, g.inner]`, each
    /// row the sum, in the order of the list, of the gradient's rows whose index picked it
    /// (0 where none did). An index out of range picks no row; nothing is read at it.
    fn index_add(&self, index: &Self, dtype: DType, g: Gather) -> Result<Self>;
    /// Cross-entropy's loss of each row of `[rows, classes]` logits (float types only):
    /// `log(sum(exp(row))) - row[target]`, with `targets` `rows` i32 of this buffer's
    /// device. A target out of `[0, classes)` is an error (the first one, in order).
    /// Waits for the check.
    fn cross_entropy_rows(&self, targets: &Self, dtype: DType, rows: usize, classes: usize) -> Result<Self>;
    /// The gradient of [`cross_entropy_rows`](Self::cross_entropy_rows) with respect to
    /// these logits, given `grad` (`rows` elements: each row's loss's gradient):
    /// `(softmax(row) - onehot(target)) * grad[row]`, `[rows, classes]`. The targets were
    /// checked by the forward; one out of range matches no class.
    fn cross_entropy_back(
        &self,
        targets: &Self,
        grad: &Self,
        dtype: DType,
        rows: usize,
        classes: usize,
    ) -> Result<Self>;

    /// `self op rhs` (operands of `dtype`) as `u8` 1 or 0 into an `out_shape` result, the
    /// operands lined up by `layout`.
    fn compare(&self, rhs: &Self, op: CompareOp, dtype: DType, out_shape: &[usize], layout: &Layout) -> Result<Self>;
    /// `self[i] op rhs` as `u8` 1 or 0 for each of the `len` elements; `rhs` has type `dtype`.
    fn compare_scalar(&self, op: CompareOp, dtype: DType, len: usize, rhs: Scalar) -> Result<Self>;
    /// With this buffer a `u8` mask: `a` where the mask is not 0, else `b`, into an
    /// `out_shape` result of `dtype`. `strides` are the mask's, `a`'s and `b`'s over
    /// `out_shape`, 0 where one is broadcast.
    fn select_where(
        &self,
        a: &Self,
        b: &Self,
        dtype: DType,
        out_shape: &[usize],
        strides: [&[usize]; 3],
    ) -> Result<Self>;
    /// Over the dim `r` describes (`r.len` from 1 to `i32::MAX`): the `i32` index of the
    /// first maximum (NaN wins: the first NaN), and with `values` the element there.
    fn argmax(&self, dtype: DType, r: Reduction, values: bool) -> Result<(Self, Option<Self>)>;
    /// This memory's address on its device (the key of a graph input's index rules).
    fn addr(&self) -> u64;
    /// Checks this buffer's first i32 elements against each `(count, bound)` of `limits`
    /// (a graph input's index rules, this buffer the source of a write into it), after its
    /// writes (the host waits): the first limit with an index outside `[0, bound)`, as
    /// `(limit, position, index)`, or `None`. An `Err` is the check's own failure.
    fn check_indices(&self, limits: &[(usize, usize)]) -> Result<Option<(usize, usize, i32)>>;
}
