//! Softmax, log-softmax, cross-entropy's loss per row and LayerNorm's rows as jobs on the stream (the loops
//! are `host/kernels/softmax.rs`): float types only, the kernel picked before anything is
//! queued.

use half::{bf16, f16};

use crate::backend::host::buffer::HostBuffer;
use crate::backend::host::kernels::softmax;
use crate::backend::host::launch::{launch, typed, typed_mut, Launch};
use crate::backend::sync::capture::Indexed;
use crate::backend::{float_only, SoftmaxOp};
use crate::element::{DType, Float};
use crate::error::{Error, Result};
use crate::shape::Reduction;

/// The softmax `op` over the dim `r` describes.
/// With `grad`, `x` is the op's output and the result its input's gradient (the last dim).
pub(in crate::backend::host) fn softmax(
    x: &HostBuffer,
    grad: Option<&HostBuffer>,
    op: SoftmaxOp,
    dtype: DType,
    r: Reduction,
) -> Result<HostBuffer> {
    let job = x.op(op.name(), dtype, r.outer * r.len * r.inner);
    let Some(g) = grad else {
        type Kernel = fn(SoftmaxOp, &[u8], &mut [u8], Reduction) -> Result<()>;
        let kernels: [Kernel; 4] = [softmax_of::<f32>, softmax_of::<f64>, softmax_of::<bf16>, softmax_of::<f16>];
        let f = float_kernel(op.name(), dtype, kernels)?;
        return launch(job, &[x], Box::new(move |ins, out| f(op, ins[0], out, r)));
    };
    op.check_back(r)?;
    type Back = fn(SoftmaxOp, &[u8], &[u8], &mut [u8], usize) -> Result<()>;
    let kernels: [Back; 4] = [back_of::<f32>, back_of::<f64>, back_of::<bf16>, back_of::<f16>];
    let f = float_kernel(op.name(), dtype, kernels)?;
    launch(job, &[x, g], Box::new(move |ins, out| f(op, ins[0], ins[1], out, r.len)))
}

/// Cross-entropy's loss of each of `n` rows of `classes` logits.
pub(in crate::backend::host) fn cross_entropy_rows(
    x: &HostBuffer,
    targets: &HostBuffer,
    dtype: DType,
    n: usize,
    classes: usize,
) -> Result<HostBuffer> {
    type Kernel = fn(&[u8], &[u8], &mut [u8], usize) -> Result<()>;
    let kernels: [Kernel; 4] =
        [cross_entropy_of::<f32>, cross_entropy_of::<f64>, cross_entropy_of::<bf16>, cross_entropy_of::<f16>];
    let f = float_kernel("cross_entropy", dtype, kernels)?;
    launch(
        Launch { check: true, indices: Some((n, Indexed::Classes(classes))), ..x.op("cross_entropy", dtype, n) },
        &[x, targets],
        Box::new(move |ins, out| f(ins[0], ins[1], out, classes)),
    )
}

/// LayerNorm's normalisation of `rows` rows of `len` of `x`, or with `grad` its gradient.
pub(in crate::backend::host) fn layer_norm(
    x: &HostBuffer,
    grad: Option<&HostBuffer>,
    dtype: DType,
    (rows, len): (usize, usize),
    eps: f64,
) -> Result<HostBuffer> {
    type Kernel = fn(&[u8], Option<&[u8]>, &mut [u8], usize, f64) -> Result<()>;
    let kernels: [Kernel; 4] =
        [layer_norm_of::<f32>, layer_norm_of::<f64>, layer_norm_of::<bf16>, layer_norm_of::<f16>];
    let f = float_kernel("layer_norm", dtype, kernels)?;
    let job = x.op("layer_norm", dtype, rows * len);
    match grad {
        None => launch(job, &[x], Box::new(move |ins, out| f(ins[0], None, out, len, eps))),
        Some(g) => launch(job, &[x, g], Box::new(move |ins, out| f(ins[0], Some(ins[1]), out, len, eps))),
    }
}

/// A kernel of float types only, picked by `dtype` before anything is queued (a job that
/// cannot fail must not meet a type it has no loop for): `kernels` holds the f32, f64,
/// bf16 and f16 kernels, in that order.
pub(super) fn float_kernel<F: Copy>(op: &'static str, dtype: DType, kernels: [F; 4]) -> Result<F> {
    float_only(op, dtype)?;
    match dtype {
        DType::F32 => Ok(kernels[0]),
        DType::F64 => Ok(kernels[1]),
        DType::BF16 => Ok(kernels[2]),
        DType::F16 => Ok(kernels[3]),
        _ => Err(Error::InvalidArgument { op, reason: format!("has no host kernel for {dtype}") }),
    }
}

/// [`softmax::softmax`] over buffers of `T`.
fn softmax_of<T: Float>(op: SoftmaxOp, x: &[u8], out: &mut [u8], r: Reduction) -> Result<()> {
    softmax::softmax::<T>(op, typed(x), typed_mut(out), r)
}

/// [`softmax::softmax_back`] over buffers of `T`.
fn back_of<T: Float>(op: SoftmaxOp, y: &[u8], g: &[u8], out: &mut [u8], len: usize) -> Result<()> {
    softmax::softmax_back::<T>(op, typed(y), typed(g), typed_mut(out), len)
}

/// [`softmax::cross_entropy_rows`] over buffers of `T` (and i32 targets).
fn cross_entropy_of<T: Float>(x: &[u8], targets: &[u8], out: &mut [u8], classes: usize) -> Result<()> {
    softmax::cross_entropy_rows::<T>(typed(x), typed(targets), typed_mut(out), classes)
}

/// [`softmax::layer_norm`] over buffers of `T`.
fn layer_norm_of<T: Float>(x: &[u8], grad: Option<&[u8]>, out: &mut [u8], len: usize, eps: f64) -> Result<()> {
    softmax::layer_norm::<T>(typed(x), grad.map(typed), typed_mut(out), len, eps)
}
