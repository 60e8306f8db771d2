//! Softmax, log-softmax and cross-entropy's loss per row as jobs on the stream (the loops
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

/// Cross-entropy's gradient with respect to `n` rows of `classes` logits, given each row's
/// loss's gradient.
pub(in crate::backend::host) fn cross_entropy_back(
    x: &HostBuffer,
    targets: &HostBuffer,
    grad: &HostBuffer,
    dtype: DType,
    (n, classes): (usize, usize),
) -> Result<HostBuffer> {
    type Kernel = fn(&[u8], &[u8], &[u8], &mut [u8], usize) -> Result<()>;
    let kernels: [Kernel; 4] = [ce_back_of::<f32>, ce_back_of::<f64>, ce_back_of::<bf16>, ce_back_of::<f16>];
    let f = float_kernel("cross_entropy", dtype, kernels)?;
    launch(
        x.op("cross_entropy", dtype, n * classes),
        &[x, targets, grad],
        Box::new(move |ins, out| f(ins[0], ins[1], ins[2], out, classes)),
    )
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

/// [`softmax::cross_entropy_back`] over buffers of `T` (and i32 targets).
fn ce_back_of<T: Float>(x: &[u8], targets: &[u8], g: &[u8], out: &mut [u8], classes: usize) -> Result<()> {
    softmax::cross_entropy_back::<T>(typed(x), typed(targets), typed(g), typed_mut(out), classes)
}
