//! LayerNorm and its gradients as jobs on the stream (the loops are
//! `host/kernels/softmax.rs`): the forward one job, the backward one for the input's
//! gradient and, with a weight, one each for the weight's and the bias's.

use half::{bf16, f16};

use super::softmax::float_kernel;
use crate::backend::host::buffer::HostBuffer;
use crate::backend::host::kernels::softmax;
use crate::backend::host::launch::{launch, typed, typed_mut};
use crate::backend::{Norm, NormGrads};
use crate::element::{DType, Float};
use crate::error::Result;

/// Each of `rows` rows of `len` of `x` normalised, then times the weight plus the bias of
/// `affine` when given.
pub(in crate::backend::host) fn forward(
    x: &HostBuffer,
    affine: Option<(&HostBuffer, &HostBuffer)>,
    dtype: DType,
    Norm { rows, len, eps }: Norm,
) -> Result<HostBuffer> {
    let f = float_kernel(
        "layer_norm",
        dtype,
        [forward_of::<f32>, forward_of::<f64>, forward_of::<bf16>, forward_of::<f16>],
    )?;
    let job = x.op("layer_norm", dtype, rows * len);
    match affine {
        None => launch(job, &[x], Box::new(move |ins, out| f(ins[0], None, out, len, eps))),
        Some((w, b)) => {
            launch(job, &[x, w, b], Box::new(move |ins, out| f(ins[0], Some((ins[1], ins[2])), out, len, eps)))
        }
    }
}

/// The gradients of [`forward`] at `x` given `grad`: with respect to `x`, and with the
/// forward's `weight`, with respect to the weight and the bias.
pub(in crate::backend::host) fn backward(
    x: &HostBuffer,
    grad: &HostBuffer,
    weight: Option<&HostBuffer>,
    dtype: DType,
    Norm { rows, len, eps }: Norm,
) -> Result<NormGrads<HostBuffer>> {
    let f = float_kernel("layer_norm", dtype, [back_of::<f32>, back_of::<f64>, back_of::<bf16>, back_of::<f16>])?;
    let p = float_kernel("layer_norm", dtype, [param_of::<f32>, param_of::<f64>, param_of::<bf16>, param_of::<f16>])?;
    let job = x.op("layer_norm", dtype, rows * len);
    let Some(w) = weight else {
        return Ok((launch(job, &[x, grad], Box::new(move |ins, out| f(ins[0], ins[1], None, out, len, eps)))?, None));
    };
    let dx = launch(job, &[x, grad, w], Box::new(move |ins, out| f(ins[0], ins[1], Some(ins[2]), out, len, eps)))?;
    let param = |bias: bool| {
        launch(
            x.op("layer_norm", dtype, len),
            &[x, grad],
            Box::new(move |ins, out| p(ins[0], ins[1], bias, out, len, eps)),
        )
    };
    Ok((dx, Some((param(false)?, param(true)?))))
}

/// [`softmax::layer_norm`] over buffers of `T`.
fn forward_of<T: Float>(x: &[u8], affine: Option<(&[u8], &[u8])>, out: &mut [u8], len: usize, eps: f64) -> Result<()> {
    softmax::layer_norm::<T>(typed(x), affine.map(|(w, b)| (typed(w), typed(b))), typed_mut(out), len, eps)
}

/// [`softmax::layer_norm_back`] over buffers of `T`.
fn back_of<T: Float>(x: &[u8], g: &[u8], w: Option<&[u8]>, out: &mut [u8], len: usize, eps: f64) -> Result<()> {
    softmax::layer_norm_back::<T>(typed(x), typed(g), w.map(typed), typed_mut(out), len, eps)
}

/// [`softmax::layer_norm_param`] over buffers of `T`.
fn param_of<T: Float>(x: &[u8], g: &[u8], bias: bool, out: &mut [u8], len: usize, eps: f64) -> Result<()> {
    softmax::layer_norm_param::<T>(typed(x), typed(g), bias, typed_mut(out), len, eps)
}
