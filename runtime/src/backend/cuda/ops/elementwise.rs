//! The elementwise ops, kernels of elementwise.cu: unary ops, unary ops with scalar
//! parameters (`pow`, `clamp`), and binary ops of two tensors (same shape, or broadcast
//! through [`Bcast`]), of a tensor and a scalar, and of a scalar and a tensor. Integer
//! division checks its divisor on the device, through an error flag the kernel sets.

use std::sync::Arc;

use locus_kernels::Source;

use crate::backend::cuda::driver::buffer::CudaBuffer;
use crate::backend::cuda::driver::device::DeviceState;
use crate::backend::cuda::driver::flag::with_flag;
use crate::backend::cuda::driver::launch::{flat_grid, produce, vector_work, KernelArg, KernelArgs};
use crate::backend::cuda::driver::memory::{alloc, done};
use crate::backend::cuda::driver::stream::CudaStream;
use crate::backend::{float_only, BinaryOp, ParamOp, UnaryOp};
use crate::element::{DType, Scalar};
use crate::error::{Error, Result};
use crate::shape::Layout;

/// Up to 8 dims of a broadcast, with per-operand strides; matches `Bcast` in
/// elementwise.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct Bcast {
    rank: i32,
    shape: [u64; 8],
    lhs: [u64; 8],
    rhs: [u64; 8],
}

/// `#[repr(C)]` with the kernel's field order and types: `int` then three `u64[8]`.
impl KernelArg for Bcast {}

/// Merges neighbouring dims that both operands walk contiguously, then packs them.
fn bcast(op: &'static str, shape: &[usize], lhs: &[usize], rhs: &[usize]) -> Result<Bcast> {
    let mut dims: Vec<(u64, u64, u64)> = Vec::new();
    for i in 0..shape.len() {
        let (n, l, r) = (shape[i] as u64, lhs[i] as u64, rhs[i] as u64);
        if n == 1 {
            continue;
        }
        match dims.last_mut() {
            Some(last) if last.1 == l * n && last.2 == r * n => *last = (last.0 * n, l, r),
            _ => dims.push((n, l, r)),
        }
    }
    if dims.len() > 8 {
        return Err(Error::InvalidArgument {
            op,
            reason: format!("broadcasting over {} non-mergeable dims; the cuda backend takes at most 8", dims.len()),
        });
    }
    let mut b = Bcast { rank: dims.len() as i32, shape: [1; 8], lhs: [0; 8], rhs: [0; 8] };
    for (i, (n, l, r)) in dims.into_iter().enumerate() {
        (b.shape[i], b.lhs[i], b.rhs[i]) = (n, l, r);
    }
    Ok(b)
}

/// The element type a scalar holds.
pub(in crate::backend::cuda) fn scalar_dtype(s: Scalar) -> DType {
    match s {
        Scalar::F32(_) => DType::F32,
        Scalar::F64(_) => DType::F64,
        Scalar::I32(_) => DType::I32,
        Scalar::I64(_) => DType::I64,
        Scalar::U8(_) => DType::U8,
        Scalar::BF16(_) => DType::BF16,
        Scalar::F16(_) => DType::F16,
    }
}

/// Runs `launch` with an error flag for integer division (when `check`; else with none),
/// and reports a zero divisor (the kernels set the flag's first 4 bytes to 1).
fn with_div_check(
    dev: &'static DeviceState,
    s: &Arc<CudaStream>,
    check: bool,
    launch: impl FnOnce(Option<&CudaBuffer>) -> Result<()>,
) -> Result<()> {
    if !check {
        return launch(None);
    }
    if with_flag(dev, s, 0, |flag| launch(Some(flag)))? != 0 {
        return Err(Error::InvalidArgument { op: "div", reason: "integer division by zero".into() });
    }
    Ok(())
}

/// `op` of each of the `len` elements of `x`.
pub(in crate::backend::cuda) fn unary(x: &CudaBuffer, op: UnaryOp, dtype: DType, len: usize) -> Result<CudaBuffer> {
    let opname = op.name();
    if op.is_float_only() {
        float_only(opname, dtype)?;
    }
    let n = len as u64;
    // SAFETY: `{op}_{dtype}(const T* x, T* out, u64 n)` gets `x` (an input, `len`
    // elements of `dtype` by the caller's contract), the output (`len` elements) and
    // `n` = `len`.
    unsafe {
        produce(x.device(), dtype, len, (Source::Elementwise, opname, vector_work(n, dtype)), &[x], |out| {
            KernelArgs::new().ptr(x).ptr(out).u64(n)
        })
    }
}

/// `g[i] · op'(x[i])` by `{op}_grad_{dtype}` (gelu and gelu_tanh).
pub(in crate::backend::cuda) fn activation_grad(
    x: &CudaBuffer,
    g: &CudaBuffer,
    op: UnaryOp,
    dtype: DType,
    len: usize,
) -> Result<CudaBuffer> {
    let name = op.grad_name()?;
    float_only(name, dtype)?;
    let n = len as u64;
    // SAFETY: `{op}_grad_{dtype}(const T* x, const T* g, T* out, u64 n)` gets `x` and `g`
    // (inputs, `len` elements of `dtype` each by the caller's contract), the output (`len`
    // elements) and `n` = `len`.
    unsafe {
        produce(x.device(), dtype, len, (Source::Elementwise, name, vector_work(n, dtype)), &[x, g], |out| {
            KernelArgs::new().ptr(x).ptr(g).ptr(out).u64(n)
        })
    }
}

/// Each of the `len` elements of `from` converted to `to`, by `cast_{from}_{to}`.
pub(in crate::backend::cuda) fn cast(x: &CudaBuffer, from: DType, to: DType, len: usize) -> Result<CudaBuffer> {
    let (dev, n) = (x.device(), len as u64);
    let (s, out) = alloc(dev, to, len, &[x])?;
    if len > 0 {
        let f = dev.kernel(Source::Elementwise, "cast", from.name(), to)?;
        let args = KernelArgs::new().ptr(x).ptr(&out).u64(n);
        // `f` is `cast_{from}_{to}(const F* x, T* out, u64 n)` of this device; `x`
        // holds `len` elements of `from` (the caller's contract), made ready on `s` and kept
        // alive past the kernel by `alloc`; `out` holds `len` elements of `to`, allocated
        // on `s`; the kernel bounds its accesses by `n` = `len`, whatever the grid.
        // SAFETY: for the reasons in the comment just above.
        unsafe { dev.launch(f, (flat_grid(n, 256), 1, 1), (256, 1, 1), &s, args)? };
    }
    done(out)
}

/// Same-shape operands of at most this many elements use the one-element-per-thread
/// kernel: below it a kernel is bound by its latency, not by memory.
const SMALL: u64 = 1 << 16;

/// `op` of `lhs` and `rhs` into a new buffer of `out_shape`, walking the operands as
/// `layout` says.
pub(in crate::backend::cuda) fn binary(
    lhs: &CudaBuffer,
    rhs: &CudaBuffer,
    op: BinaryOp,
    dtype: DType,
    out_shape: &[usize],
    layout: &Layout,
) -> Result<CudaBuffer> {
    let len: usize = out_shape.iter().product();
    let dev = lhs.device();
    let (s, out) = alloc(dev, dtype, len, &[lhs, rhs])?;
    if len == 0 {
        return done(out);
    }
    let (lb, rb, n) = (lhs, rhs, len as u64);
    let check = op == BinaryOp::Div && !dtype.is_float();
    let geometry = match layout {
        Layout::Same => None,
        Layout::RhsScalar => Some(bcast(op.name(), &[len], &[1], &[0])?),
        Layout::LhsScalar => Some(bcast(op.name(), &[len], &[0], &[1])?),
        Layout::Strided { lhs, rhs } => Some(bcast(op.name(), out_shape, lhs, rhs)?),
    };
    with_div_check(dev, &s, check, |err| {
        let args = KernelArgs::new().ptr(lb).ptr(rb).ptr(&out).u64(n);
        match geometry {
            None if n <= SMALL => {
                let f = dev.kernel(Source::Elementwise, op.name(), "small", dtype)?;
                // `{op}_small_{dtype}(const T* a, const T* b, T* out, u64 n, int* err)`, one element per thread:
                // SAFETY: as for `same` below; the grid covers `n` threads, each of which touches element `i < n`
                // only.
                unsafe { dev.launch(f, (flat_grid(n, 256), 1, 1), (256, 1, 1), &s, args.ptr_or_null(err)) }
            }
            None => {
                let f = dev.kernel(Source::Elementwise, op.name(), "same", dtype)?;
                let grid = flat_grid(vector_work(n, dtype), 256);
                // `{op}_same_{dtype}(const T* a, const T* b, T* out, u64 n, int* err)`:
                // SAFETY: `lhs`, `rhs` and `out` each hold `n` = `len` elements of `dtype` (same layout: equal shapes),
                // ready and kept alive on `s` (see `alloc`); `err` is the 4-byte flag of `with_div_check`, or null
                // where no op can divide an integer by zero (the kernels touch `err` only then).
                unsafe { dev.launch(f, (grid, 1, 1), (256, 1, 1), &s, args.ptr_or_null(err)) }
            }
            Some(bc) => {
                let f = dev.kernel(Source::Elementwise, op.name(), "bcast", dtype)?;
                // `{op}_bcast_{dtype}(const T* a, const T* b, T* out, u64 n, Bcast bc, int* err)`:
                // SAFETY: `out` holds `n` = `len` elements; `bc` is the `#[repr(C)]` mirror of the kernel's `Bcast`,
                // built from the checked broadcast strides, so every index it yields lies within `lhs` and `rhs`, ready
                // and kept alive on `s` (see `alloc`); `err` as in the same-layout case.
                unsafe { dev.launch(f, (dev.grid(n, 256), 1, 1), (256, 1, 1), &s, args.val(bc).ptr_or_null(err)) }
            }
        }
    })?;
    done(out)
}

/// `op` of each of the `len` elements of `lhs` and the scalar `rhs`.
pub(in crate::backend::cuda) fn binary_scalar(
    lhs: &CudaBuffer,
    op: BinaryOp,
    dtype: DType,
    len: usize,
    rhs: Scalar,
) -> Result<CudaBuffer> {
    let dev = lhs.device();
    let (stream, out) = alloc(dev, dtype, len, &[lhs])?;
    if len == 0 {
        return done(out);
    }
    let zero_divisor = matches!(rhs, Scalar::I32(0) | Scalar::I64(0) | Scalar::U8(0));
    if op == BinaryOp::Div && zero_divisor {
        return Err(Error::InvalidArgument { op: "div", reason: "integer division by zero".into() });
    }
    let f = dev.kernel(Source::Elementwise, op.name(), "scalar", dtype)?;
    let n = len as u64;
    let grid = flat_grid(vector_work(n, dtype), 256);
    let args = KernelArgs::new().ptr(lhs).scalar(rhs).ptr(&out).u64(n).ptr_or_null(None);
    // `{op}_scalar_{dtype}(const T* a, T s, T* out, u64 n, int* err)`:
    // SAFETY: `lhs` and `out` hold `n` = `len` elements of `dtype`, ready and kept alive on `stream` (see `alloc`);
    // `rhs` has `dtype`'s Rust type (the tensor layer passes `T::to_scalar` with `T::DTYPE`); `err` is null, which
    // the kernel never touches since an integer zero divisor was refused above.
    unsafe { dev.launch(f, (grid, 1, 1), (256, 1, 1), &stream, args)? };
    done(out)
}

/// `op` of the scalar `lhs` and each of the `len` elements of `rhs`.
pub(in crate::backend::cuda) fn scalar_binary(
    lhs: Scalar,
    rhs: &CudaBuffer,
    op: BinaryOp,
    dtype: DType,
    len: usize,
) -> Result<CudaBuffer> {
    if matches!(op, BinaryOp::Add | BinaryOp::Mul) {
        // These commute (IEEE and wrapping integer arithmetic alike).
        return binary_scalar(rhs, op, dtype, len, lhs);
    }
    let dev = rhs.device();
    let (s, out) = alloc(dev, dtype, len, &[rhs])?;
    if len == 0 {
        return done(out);
    }
    let check = op == BinaryOp::Div && !dtype.is_float();
    let f = dev.kernel(Source::Elementwise, op.name(), "rscalar", dtype)?;
    let (rb, n) = (rhs, len as u64);
    let grid = flat_grid(vector_work(n, dtype), 256);
    with_div_check(dev, &s, check, |err| {
        let args = KernelArgs::new().ptr(rb).scalar(lhs).ptr(&out).u64(n).ptr_or_null(err);
        // `{op}_rscalar_{dtype}(const T* a, T s, T* out, u64 n, int* err)`: `rhs` and `out` hold `n` = `len` elements
        // of `dtype`, ready and kept alive on `s` (see `alloc`);
        // SAFETY: `lhs` has `dtype`'s Rust type (the tensor layer passes `T::to_scalar` with `T::DTYPE`); `err` is
        // `with_div_check`'s 4-byte flag for integer division, else null, which the kernel touches only for an integer
        // zero divisor.
        unsafe { dev.launch(f, (grid, 1, 1), (256, 1, 1), &s, args) }
    })?;
    done(out)
}

/// `op` (`pow`, `clamp`) of each of the `len` elements of `x`, with its scalar parameters.
pub(in crate::backend::cuda) fn unary_param(
    x: &CudaBuffer,
    op: ParamOp,
    dtype: DType,
    len: usize,
) -> Result<CudaBuffer> {
    let mismatch = |op| Error::InvalidArgument { op, reason: format!("parameters of another type than {dtype}") };
    let (xb, n, dev) = (x, len as u64, x.device());
    let work = |op| (Source::Elementwise, op, vector_work(n, dtype));
    if let ParamOp::Pow(_) = op {
        float_only("pow", dtype)?;
    }
    // In the launches below `x` holds `len` elements of `dtype` (the caller's contract),
    // and the parameters' Rust type is `dtype`'s (checked).
    match op {
        ParamOp::Pow(e) if scalar_dtype(e) == dtype => {
            // SAFETY: `pow_{f32,f64}(const T* x, T e, T* out, u64 n)` (a float `dtype`,
            // checked above), `x` an input of `n` = `len` elements and `e` of `dtype`'s type.
            unsafe {
                produce(dev, dtype, len, work("pow"), &[x], |out| KernelArgs::new().ptr(xb).scalar(e).ptr(out).u64(n))
            }
        }
        ParamOp::Pow(_) => Err(mismatch("pow")),
        ParamOp::Clamp(lo, hi) if scalar_dtype(lo) == dtype && scalar_dtype(hi) == dtype => {
            // SAFETY: `clamp_{dtype}(const T* x, T lo, T hi, T* out, u64 n)`, with `lo` and
            // `hi` of `dtype`'s type (checked) and `x` an input of `n` = `len` elements.
            unsafe {
                produce(dev, dtype, len, work("clamp"), &[x], |out| {
                    KernelArgs::new().ptr(xb).scalar(lo).scalar(hi).ptr(out).u64(n)
                })
            }
        }
        ParamOp::Clamp(..) => Err(mismatch("clamp")),
    }
}
