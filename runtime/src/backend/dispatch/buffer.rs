//! [`Buffer`], the memory of either backend, and its storage-level ops: the one place
//! where operands' variants are matched. Operands of one op are on one device (the
//! tensor layer checks that), so a host buffer meeting a cuda buffer is a caller's bug,
//! reported as the device mismatch it is rather than a panic. The row ops (softmax,
//! LayerNorm, cross-entropy) are in `rows`.

use crate::backend::api::traits::BackendStorage;
use crate::backend::cuda::CudaBuffer;
use crate::backend::dispatch::capture;
use crate::backend::{
    AnyEvent, AnyStream, BinaryOp, Blocks, CompareOp, Gather, Gemm, HostBuffer, ParamOp, Permute, ReduceKind, UnaryOp,
};
use crate::device_id::DeviceId;
use crate::element::{DType, Scalar};
use crate::error::{Error, Result};
use crate::shape::{Layout, Reduction};

/// Device memory of one backend.
#[derive(Debug)]
pub(crate) enum Buffer {
    Host(Box<HostBuffer>), // boxed: twice a device buffer's size, and ops move outputs
    Cuda(CudaBuffer),
}

/// Two operands of one backend.
pub(super) enum Pair<'a> {
    Host(&'a HostBuffer, &'a HostBuffer),
    Cuda(&'a CudaBuffer, &'a CudaBuffer),
}

/// Several operands of one backend, in order: the first, then the others.
pub(super) enum Many<'a> {
    Host(&'a HostBuffer, Vec<&'a HostBuffer>),
    Cuda(&'a CudaBuffer, Vec<&'a CudaBuffer>),
}

/// Why a host read cannot be captured.
const HOST_READ: &str = "nothing runs while a graph is captured, so there is nothing to read yet; \
     read the graph's outputs after `replay()`";

/// A stream of the other backend: a bug above the backends, reported, not a panic.
fn foreign_stream() -> Error {
    Error::InvalidArgument { op: "backend", reason: "a stream of one backend was handed memory of the other".into() }
}

pub(super) fn mismatch(op: &'static str, lhs: &Buffer, rhs: &Buffer) -> Error {
    Error::DeviceMismatch { op, lhs: lhs.device_id(), rhs: rhs.device_id() }
}

impl Buffer {
    /// A host backend's buffer.
    pub(crate) fn host(b: HostBuffer) -> Buffer {
        Buffer::Host(Box::new(b))
    }

    /// The host memory of this buffer, if it is host memory.
    pub(crate) fn as_host(&self) -> Option<&HostBuffer> {
        match self {
            Buffer::Host(h) => Some(h),
            Buffer::Cuda(_) => None,
        }
    }

    pub(super) fn pair<'a>(&'a self, op: &'static str, rhs: &'a Buffer) -> Result<Pair<'a>> {
        match (self, rhs) {
            (Buffer::Host(a), Buffer::Host(b)) => Ok(Pair::Host(a, b)),
            (Buffer::Cuda(a), Buffer::Cuda(b)) => Ok(Pair::Cuda(a, b)),
            _ => Err(mismatch(op, self, rhs)),
        }
    }

    /// This buffer and `others`, all of this one's backend.
    pub(super) fn many<'a>(
        &'a self,
        op: &'static str,
        others: impl IntoIterator<Item = &'a Buffer>,
    ) -> Result<Many<'a>> {
        let mut out = match self {
            Buffer::Host(h) => Many::Host(h, Vec::new()),
            Buffer::Cuda(c) => Many::Cuda(c, Vec::new()),
        };
        for b in others {
            match (&mut out, b) {
                (Many::Host(_, v), Buffer::Host(h)) => v.push(h),
                (Many::Cuda(_, v), Buffer::Cuda(c)) => v.push(c),
                _ => return Err(mismatch(op, self, b)),
            }
        }
        Ok(out)
    }
}

/// The storage-level ops, each matched once to its backend (see `BackendStorage`).
impl Buffer {
    pub(crate) fn device_id(&self) -> DeviceId {
        match self {
            Buffer::Host(h) => h.device_id(),
            Buffer::Cuda(c) => c.device_id(),
        }
    }

    /// [`BackendStorage::addr`].
    pub(crate) fn addr(&self) -> u64 {
        match self {
            Buffer::Host(h) => BackendStorage::addr(&**h),
            Buffer::Cuda(c) => c.addr(),
        }
    }

    /// [`BackendStorage::check_indices`].
    pub(crate) fn check_indices(&self, limits: &[(usize, usize)]) -> Result<Option<(usize, usize, i32)>> {
        match self {
            Buffer::Host(h) => h.check_indices(limits),
            Buffer::Cuda(c) => c.check_indices(limits),
        }
    }

    pub(crate) fn download(&self, out: &mut [std::mem::MaybeUninit<u8>]) -> Result<()> {
        capture::refuse("to_vec / item (a read by the host)", HOST_READ)?;
        match self {
            Buffer::Host(h) => h.download(out),
            Buffer::Cuda(c) => c.download(out),
        }
    }

    /// Queues a copy of this buffer into pinned `dst` on `stream`; the event marks its
    /// end, and `dst` is held from reuse by the pinned pool (and from host reads and
    /// writes) until then: the rule of every backend, written here once.
    pub(crate) fn download_async(&self, dst: &mut HostBuffer, stream: &AnyStream) -> Result<AnyEvent> {
        capture::refuse("to_pinned_async", HOST_READ)?;
        let done = match (self, stream) {
            (Buffer::Host(h), AnyStream::Host(s)) => AnyEvent::Host(h.download_async(dst, s)?),
            (Buffer::Cuda(c), AnyStream::Cuda(s)) => AnyEvent::Cuda(c.download_async(dst, s)?),
            _ => return Err(foreign_stream()),
        };
        dst.hold_until(done.fence());
        Ok(done)
    }

    pub(crate) fn use_on_stream(&self, stream: &AnyStream) -> Result<()> {
        capture::on_device("record_stream", self.device_id())?;
        match (self, stream) {
            (Buffer::Host(h), AnyStream::Host(s)) => h.use_on_stream(s),
            (Buffer::Cuda(c), AnyStream::Cuda(s)) => BackendStorage::use_on_stream(c, s),
            _ => Err(foreign_stream()),
        }
    }

    pub(crate) fn before_write(&self, stream: &AnyStream) -> Result<()> {
        match (self, stream) {
            (Buffer::Host(h), AnyStream::Host(s)) => h.before_write(s),
            (Buffer::Cuda(c), AnyStream::Cuda(s)) => BackendStorage::before_write(c, s),
            _ => Err(foreign_stream()),
        }
    }

    pub(crate) fn after_write(&self, stream: &AnyStream) -> Result<()> {
        match (self, stream) {
            (Buffer::Host(h), AnyStream::Host(s)) => h.after_write(s),
            (Buffer::Cuda(c), AnyStream::Cuda(s)) => BackendStorage::after_write(c, s),
            _ => Err(foreign_stream()),
        }
    }

    /// A graph's replay on `stream` just wrote this memory (`CudaBuffer::after_replay`).
    pub(crate) fn after_replay(&self, stream: &AnyStream) -> Result<()> {
        match (self, stream) {
            (Buffer::Host(h), AnyStream::Host(s)) => h.after_write(s),
            (Buffer::Cuda(c), AnyStream::Cuda(s)) => c.after_replay(s),
            _ => Err(foreign_stream()),
        }
    }

    pub(crate) fn overwrite(&self, src: &Buffer) -> Result<()> {
        capture::refuse("copy_from", "inputs are written between replays, not in the graph")?;
        match self.pair("copy_from", src)? {
            Pair::Host(a, b) => a.overwrite(b),
            Pair::Cuda(a, b) => a.overwrite(b),
        }
    }

    pub(crate) fn lend(&self, stream: &AnyStream, write: bool) -> Result<u64> {
        capture::refuse(
            "a raw view",
            "code outside locus cannot be recorded into a graph; take the view outside the capture",
        )?;
        match (self, stream) {
            (Buffer::Host(h), AnyStream::Host(s)) => h.lend(s, write),
            (Buffer::Cuda(c), AnyStream::Cuda(s)) => c.lend(s, write),
            _ => Err(foreign_stream()),
        }
    }

    pub(crate) fn forget_captured_writes(&self) {
        match self {
            Buffer::Host(h) => h.forget_captured_writes(),
            Buffer::Cuda(c) => BackendStorage::forget_captured_writes(c),
        }
    }

    /// `op` of each element, or with `grad` its gradient `grad · op'(x)` in one kernel
    /// ([`BackendStorage::activation_grad`]).
    pub(crate) fn unary(&self, op: UnaryOp, grad: Option<&Buffer>, dtype: DType, len: usize) -> Result<Buffer> {
        capture::on_device(op.name(), self.device_id())?;
        match (self, grad.map(|g| self.pair(op.name(), g)).transpose()?) {
            (_, Some(Pair::Host(x, g))) => x.activation_grad(g, op, dtype, len).map(Buffer::host),
            (_, Some(Pair::Cuda(x, g))) => x.activation_grad(g, op, dtype, len).map(Buffer::Cuda),
            (Buffer::Host(h), None) => h.unary(op, dtype, len).map(Buffer::host),
            (Buffer::Cuda(c), None) => c.unary(op, dtype, len).map(Buffer::Cuda),
        }
    }

    pub(crate) fn cast(&self, from: DType, to: DType, len: usize) -> Result<Buffer> {
        capture::on_device("to_dtype", self.device_id())?;
        match self {
            Buffer::Host(h) => h.cast(from, to, len).map(Buffer::host),
            Buffer::Cuda(c) => c.cast(from, to, len).map(Buffer::Cuda),
        }
    }

    pub(crate) fn unary_param(&self, op: ParamOp, dtype: DType, len: usize) -> Result<Buffer> {
        capture::on_device(op.name(), self.device_id())?;
        match self {
            Buffer::Host(h) => h.unary_param(op, dtype, len).map(Buffer::host),
            Buffer::Cuda(c) => c.unary_param(op, dtype, len).map(Buffer::Cuda),
        }
    }

    pub(crate) fn binary(
        &self,
        rhs: &Buffer,
        op: BinaryOp,
        dtype: DType,
        out_shape: &[usize],
        layout: &Layout,
    ) -> Result<Buffer> {
        capture::on_device(op.name(), self.device_id())?;
        capture::division(op, dtype)?;
        match self.pair(op.name(), rhs)? {
            Pair::Host(a, b) => a.binary(b, op, dtype, out_shape, layout).map(Buffer::host),
            Pair::Cuda(a, b) => a.binary(b, op, dtype, out_shape, layout).map(Buffer::Cuda),
        }
    }

    pub(crate) fn binary_scalar(&self, op: BinaryOp, dtype: DType, len: usize, rhs: Scalar) -> Result<Buffer> {
        capture::on_device(op.name(), self.device_id())?;
        capture::division(op, dtype)?;
        match self {
            Buffer::Host(h) => h.binary_scalar(op, dtype, len, rhs).map(Buffer::host),
            Buffer::Cuda(c) => c.binary_scalar(op, dtype, len, rhs).map(Buffer::Cuda),
        }
    }

    pub(crate) fn scalar_binary(&self, op: BinaryOp, dtype: DType, lhs: Scalar, len: usize) -> Result<Buffer> {
        capture::on_device(op.name(), self.device_id())?;
        capture::division(op, dtype)?;
        match self {
            Buffer::Host(h) => h.scalar_binary(op, dtype, lhs, len).map(Buffer::host),
            Buffer::Cuda(c) => c.scalar_binary(op, dtype, lhs, len).map(Buffer::Cuda),
        }
    }

    pub(crate) fn reduce(&self, op: ReduceKind, dtype: DType, r: Reduction) -> Result<Buffer> {
        capture::on_device(op.name(), self.device_id())?;
        match self {
            Buffer::Host(h) => h.reduce(op, dtype, r).map(Buffer::host),
            Buffer::Cuda(c) => c.reduce(op, dtype, r).map(Buffer::Cuda),
        }
    }

    pub(crate) fn matmul(&self, rhs: &Buffer, dtype: DType, g: Gemm) -> Result<Buffer> {
        capture::on_device("matmul", self.device_id())?;
        match self.pair("matmul", rhs)? {
            Pair::Host(a, b) => a.matmul(b, dtype, g).map(Buffer::host),
            Pair::Cuda(a, b) => a.matmul(b, dtype, g).map(Buffer::Cuda),
        }
    }

    pub(crate) fn transpose(&self, dtype: DType, rows: usize, cols: usize) -> Result<Buffer> {
        capture::on_device("transpose", self.device_id())?;
        match self {
            Buffer::Host(h) => h.transpose(dtype, rows, cols).map(Buffer::host),
            Buffer::Cuda(c) => c.transpose(dtype, rows, cols).map(Buffer::Cuda),
        }
    }

    pub(crate) fn permute(&self, dtype: DType, p: &Permute) -> Result<Buffer> {
        capture::on_device("transpose", self.device_id())?;
        match self {
            Buffer::Host(h) => h.permute(dtype, p).map(Buffer::host),
            Buffer::Cuda(c) => c.permute(dtype, p).map(Buffer::Cuda),
        }
    }

    pub(crate) fn slice(&self, dtype: DType, offset: usize, len: usize) -> Result<Buffer> {
        capture::on_device("slice", self.device_id())?;
        match self {
            Buffer::Host(h) => h.slice(dtype, offset, len).map(Buffer::host),
            Buffer::Cuda(c) => c.slice(dtype, offset, len).map(Buffer::Cuda),
        }
    }

    pub(crate) fn concat(dtype: DType, parts: &[(&Buffer, usize)]) -> Result<Buffer> {
        if let Some((first, _)) = parts.first() {
            capture::on_device("cat", first.device_id())?;
        }
        let Some(((first, _), rest)) = parts.split_first() else {
            return Err(Error::InvalidArgument { op: "concat", reason: "no buffers to join".into() });
        };
        let lens = parts.iter().map(|p| p.1);
        match first.many("concat", rest.iter().map(|p| p.0))? {
            Many::Host(first, v) => {
                let parts: Vec<_> = std::iter::once(first).chain(v).zip(lens).collect();
                HostBuffer::concat(dtype, &parts).map(Buffer::host)
            }
            Many::Cuda(first, v) => {
                let parts: Vec<_> = std::iter::once(first).chain(v).zip(lens).collect();
                CudaBuffer::concat(dtype, &parts).map(Buffer::Cuda)
            }
        }
    }

    pub(crate) fn copy_blocks(&self, dtype: DType, len: usize, parts: &[Blocks<'_, Buffer>]) -> Result<Buffer> {
        capture::on_device("copy", self.device_id())?;
        match self.many("copy_blocks", parts.iter().map(|p| p.src))? {
            Many::Host(into, v) => {
                let parts: Vec<_> = parts.iter().zip(v).map(|(p, h)| p.with_src(h)).collect();
                into.copy_blocks(dtype, len, &parts).map(Buffer::host)
            }
            Many::Cuda(into, v) => {
                let parts: Vec<_> = parts.iter().zip(v).map(|(p, c)| p.with_src(c)).collect();
                into.copy_blocks(dtype, len, &parts).map(Buffer::Cuda)
            }
        }
    }

    pub(crate) fn index_select(&self, index: &Buffer, dtype: DType, g: Gather) -> Result<Buffer> {
        capture::on_device("index_select", self.device_id())?;
        match self.pair("index_select", index)? {
            Pair::Host(a, b) => a.index_select(b, dtype, g).map(Buffer::host),
            Pair::Cuda(a, b) => a.index_select(b, dtype, g).map(Buffer::Cuda),
        }
    }

    pub(crate) fn index_add(&self, index: &Buffer, dtype: DType, g: Gather) -> Result<Buffer> {
        capture::on_device("index_select", self.device_id())?;
        match self.pair("index_select", index)? {
            Pair::Host(a, b) => a.index_add(b, dtype, g).map(Buffer::host),
            Pair::Cuda(a, b) => a.index_add(b, dtype, g).map(Buffer::Cuda),
        }
    }

    pub(crate) fn compare(
        &self,
        rhs: &Buffer,
        op: CompareOp,
        dtype: DType,
        out_shape: &[usize],
        layout: &Layout,
    ) -> Result<Buffer> {
        capture::on_device(op.name(), self.device_id())?;
        match self.pair(op.name(), rhs)? {
            Pair::Host(a, b) => a.compare(b, op, dtype, out_shape, layout).map(Buffer::host),
            Pair::Cuda(a, b) => a.compare(b, op, dtype, out_shape, layout).map(Buffer::Cuda),
        }
    }

    pub(crate) fn compare_scalar(&self, op: CompareOp, dtype: DType, len: usize, rhs: Scalar) -> Result<Buffer> {
        capture::on_device(op.name(), self.device_id())?;
        match self {
            Buffer::Host(h) => h.compare_scalar(op, dtype, len, rhs).map(Buffer::host),
            Buffer::Cuda(c) => c.compare_scalar(op, dtype, len, rhs).map(Buffer::Cuda),
        }
    }

    pub(crate) fn select_where(
        &self,
        a: &Buffer,
        b: &Buffer,
        dtype: DType,
        out_shape: &[usize],
        strides: [&[usize]; 3],
    ) -> Result<Buffer> {
        capture::on_device("where", self.device_id())?;
        match (self.pair("where", a)?, self.pair("where", b)?) {
            (Pair::Host(m, a), Pair::Host(_, b)) => m.select_where(a, b, dtype, out_shape, strides).map(Buffer::host),
            (Pair::Cuda(m, a), Pair::Cuda(_, b)) => m.select_where(a, b, dtype, out_shape, strides).map(Buffer::Cuda),
            // Both pairs hold this buffer, so they are of one backend.
            _ => Err(mismatch("where", a, b)),
        }
    }

    pub(crate) fn argmax(&self, dtype: DType, r: Reduction, values: bool) -> Result<(Buffer, Option<Buffer>)> {
        capture::on_device("argmax", self.device_id())?;
        match self {
            Buffer::Host(h) => h.argmax(dtype, r, values).map(|(i, v)| (Buffer::host(i), v.map(Buffer::host))),
            Buffer::Cuda(c) => c.argmax(dtype, r, values).map(|(i, v)| (Buffer::Cuda(i), v.map(Buffer::Cuda))),
        }
    }
}
