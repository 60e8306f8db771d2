//! What the backends compute, as values: the elementwise, reduction and layout ops, the
//! shapes of a matrix product and a strided copy, the collectives, and the one check of
//! ops defined on float types only.

use crate::element::{DType, Element, Scalar};
use crate::error::{Error, Result};

/// An elementwise op of one operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UnaryOp {
    Neg,
    Relu,
    Exp,
    Sqrt,
    Abs,
    Square,
    /// The natural logarithm (float types only).
    Log,
    /// The hyperbolic tangent (float types only).
    Tanh,
    /// `1 / (1 + e^-x)`, computed without overflow for large `|x|` (float types only).
    Sigmoid,
    /// `0.5 x (1 + erf(x / sqrt 2))` (float types only).
    Gelu,
    /// `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`, PyTorch's `approximate='tanh'`
    /// (float types only).
    GeluTanh,
    /// The sine, of radians (float types only).
    Sin,
    /// The cosine, of radians (float types only).
    Cos,
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
            UnaryOp::Log => "log",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Gelu => "gelu",
            UnaryOp::GeluTanh => "gelu_tanh",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
        }
    }

    /// Whether the op is defined on float types only.
    pub(crate) fn is_float_only(self) -> bool {
        !matches!(self, UnaryOp::Neg | UnaryOp::Relu | UnaryOp::Abs | UnaryOp::Square)
    }

    /// The kernel name of this op's gradient, `g · op'(x)` as one elementwise kernel
    /// ([`BackendStorage::activation_grad`](super::BackendStorage::activation_grad)), for
    /// the ops whose gradient would otherwise take many: gelu and gelu_tanh (an `Err`
    /// for the others).
    pub(crate) fn grad_name(self) -> Result<&'static str> {
        match self {
            UnaryOp::Gelu => Ok("gelu_grad"),
            UnaryOp::GeluTanh => Ok("gelu_tanh_grad"),
            _ => Err(Error::InvalidArgument {
                op: self.name(),
                reason: "internal: this op has no one-kernel gradient".into(),
            }),
        }
    }
}

/// An elementwise comparison of two operands, giving `u8` 1 (true) or 0 (false); IEEE
/// semantics, so NaN compares false except under `Ne`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CompareOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CompareOp {
    pub(crate) fn name(self) -> &'static str {
        match self {
            CompareOp::Eq => "eq",
            CompareOp::Ne => "ne",
            CompareOp::Lt => "lt",
            CompareOp::Le => "le",
            CompareOp::Gt => "gt",
            CompareOp::Ge => "ge",
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

impl ParamOp {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ParamOp::Pow(_) => "pow",
            ParamOp::Clamp(..) => "clamp",
        }
    }
}

impl ReduceKind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            ReduceKind::Sum => "sum",
            ReduceKind::Mean => "mean",
            ReduceKind::Max => "max",
            ReduceKind::SumSquares => "sum_squares",
        }
    }

    /// Float types only (a mean, a sum of squares).
    pub(crate) fn float_only(self) -> bool {
        matches!(self, ReduceKind::Mean | ReduceKind::SumSquares)
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
#[derive(Debug)]
pub(crate) struct Blocks<'a, B> {
    pub src: &'a B,
    pub src_offset: usize,
    pub src_stride: usize,
    pub dst_offset: usize,
    pub dst_stride: usize,
    pub count: usize,
    pub block: usize,
}

// By hand: a derive would ask `B: Copy` of the buffer, which only the reference needs.
impl<B> Clone for Blocks<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B> Copy for Blocks<'_, B> {}

impl<'a, B> Blocks<'a, B> {
    /// The same geometry over another view of the source.
    pub(crate) fn with_src<C>(self, src: &'a C) -> Blocks<'a, C> {
        let Blocks { src_offset, src_stride, dst_offset, dst_stride, count, block, .. } = self;
        Blocks { src, src_offset, src_stride, dst_offset, dst_stride, count, block }
    }
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

/// What a tensor reduction computes (not `dist::ReduceOp`, which combines ranks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReduceKind {
    Sum,
    Mean,
    Max,
    /// The sum of the squares, in one read (gradient clipping's norm).
    SumSquares,
}

/// Softmax or its logarithm over one dim (float types only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SoftmaxOp {
    /// `exp(x - max) / sum(exp(x - max))`.
    Softmax,
    /// `x - max - log(sum(exp(x - max)))`.
    LogSoftmax,
}

impl SoftmaxOp {
    pub(crate) fn name(self) -> &'static str {
        match self {
            SoftmaxOp::Softmax => "softmax",
            SoftmaxOp::LogSoftmax => "log_softmax",
        }
    }

    /// The one-kernel gradient's geometry: rows over the last dim (`inner == 1`).
    pub(crate) fn check_back(self, r: crate::shape::Reduction) -> Result<()> {
        if r.inner != 1 {
            return Err(Error::InvalidArgument {
                op: self.name(),
                reason: "internal: the one-kernel gradient is over the last dim only".into(),
            });
        }
        Ok(())
    }
}

/// An `index_select` along dim `dim` of a row-major tensor seen as `[outer, size,
/// inner]`: `count` indices (i32) pick along the middle dim, into `[outer, count,
/// inner]`. Every index is checked against `size` by the backend, which reads them;
/// the first one out of range is the error, named with `dim` and `size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Gather {
    pub dim: usize,
    pub outer: usize,
    pub size: usize,
    pub inner: usize,
    pub count: usize,
}

impl Gather {
    /// Elements of the result.
    pub(crate) fn out_len(&self) -> usize {
        self.outer * self.count * self.inner
    }

    /// The error for `index`, found at position `at` of the index list.
    pub(crate) fn out_of_range(&self, at: usize, index: i64) -> Error {
        index_out_of_range(self.dim, self.size, at, index)
    }
}

/// The error of index `index`, at position `at` of the list, outside `[0, size)` of `dim`.
pub(crate) fn index_out_of_range(dim: usize, size: usize, at: usize, index: i64) -> Error {
    Error::InvalidArgument {
        op: "index_select",
        reason: format!("index {index} (at position {at}) is out of range for dim {dim} of size {size}"),
    }
}

/// The error of a cross-entropy target out of `[0, classes)`: `target`, of sample `row`.
pub(crate) fn bad_target(row: usize, target: i64, classes: usize) -> Error {
    Error::InvalidArgument {
        op: "cross_entropy",
        reason: format!("target {target} of sample {row} is out of range for {classes} classes"),
    }
}

/// A collective over one buffer per device, as NCCL runs them. Inputs hold `len`
/// elements each; input `i` lives on `devices[i]`.
#[derive(Debug)]
pub(crate) enum Collective<'a, B> {
    /// Every device gets a copy of `buf`, which lives on `devices[root]`.
    Broadcast { root: usize, buf: &'a B },
    /// Every device gets the elementwise sum of the inputs.
    AllReduceSum(&'a [&'a B]),
    /// Every device gets the inputs one after another, in device-list order.
    AllGather(&'a [&'a B]),
}

// By hand: a derive would ask `B: Copy` of the buffer, which only the references need.
impl<B> Clone for Collective<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B> Copy for Collective<'_, B> {}

/// How a collective between processes combines the ranks' elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CommReduce {
    Sum,
    /// The sum divided by the number of ranks (floating-point types only: the caller
    /// divides integer sums itself).
    Avg,
    Max,
    Min,
}

impl CommReduce {
    /// `parts` (one per rank, or per device, in that order) combined element-wise in
    /// that order, so every rank that reduces the same parts gets the same bits; `Avg`
    /// divides the sum by the number of parts (an integer one truncating). Every part
    /// has the first one's length; no parts give nothing.
    pub(crate) fn reduce_in_order<T: Element>(self, parts: &[&[T]]) -> Vec<T> {
        let Some((first, rest)) = parts.split_first() else { return Vec::new() };
        let is_nan = |x: T| x.partial_cmp(&x).is_none();
        let combine = |a: T, b: T| match self {
            CommReduce::Sum | CommReduce::Avg => a.add(b),
            CommReduce::Max => a.max_of(b),
            CommReduce::Min if is_nan(a) || a <= b => a,
            CommReduce::Min => b,
        };
        let mut acc = first.to_vec();
        for part in rest {
            for (a, &b) in acc.iter_mut().zip(part.iter()) {
                *a = combine(*a, b);
            }
        }
        if self == CommReduce::Avg {
            let n = T::from_f64(parts.len() as f64);
            for a in &mut acc {
                *a = a.div(n).unwrap_or(T::ZERO);
            }
        }
        acc
    }
}

/// A collective between processes over a communicator (NCCL's, on the cuda backend),
/// one rank per process. Inputs hold `len` elements of the comm's device. `CommReduce::Avg`
/// is refused on NCCL (the group sums and divides, see `dist::group`).
#[derive(Debug)]
pub(crate) enum CommOp<'a, B> {
    /// The elementwise reduction of every rank's `buf`: `len` elements.
    AllReduce { buf: &'a B, op: CommReduce },
    /// Rank `root`'s `buf` (every rank passes one of `len` elements): `len` elements.
    Broadcast { buf: &'a B, root: usize },
    /// Every rank's `buf` one after another: `len * world` elements.
    AllGather { buf: &'a B },
    /// Chunk `rank` of the reduction of every rank's `buf` (`len`, a multiple of the
    /// world size): `len / world` elements.
    ReduceScatter { buf: &'a B, op: CommReduce },
    /// `buf` to rank `peer`: no result.
    Send { buf: &'a B, peer: usize },
    /// `len` elements from rank `peer`.
    Recv { peer: usize },
}

// By hand: a derive would ask `B: Copy` of the buffer, which only the references need.
impl<B> Clone for CommOp<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<B> Copy for CommOp<'_, B> {}

impl<B> CommOp<'_, B> {
    /// The collective's name, for messages.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            CommOp::AllReduce { .. } => "all_reduce",
            CommOp::Broadcast { .. } => "broadcast",
            CommOp::AllGather { .. } => "all_gather",
            CommOp::ReduceScatter { .. } => "reduce_scatter",
            CommOp::Send { .. } => "send",
            CommOp::Recv { .. } => "recv",
        }
    }
}

/// The one check (and message) both backends make before copying a buffer into host
/// memory: the destination holds exactly the source's bytes.
pub(crate) fn same_length(op: &'static str, dst: usize, src: usize) -> crate::error::Result<()> {
    if dst == src {
        Ok(())
    } else {
        Err(crate::error::Error::InvalidArgument {
            op,
            reason: format!("host buffer of the wrong length ({dst} bytes for {src})"),
        })
    }
}
