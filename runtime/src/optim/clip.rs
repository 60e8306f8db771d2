//! Gradient clipping by global norm (PyTorch's `clip_grad_norm_`), without a host sync:
//! on a CUDA device three kernels for up to 32 gradients (their squares summed, the norm
//! and the factor, the gradients scaled in place), whatever the number of parameters.

use super::multi;
use crate::autograd::{no_grad, Param};
use crate::backend::BinaryOp;
use crate::device::{Device, DeviceId};
use crate::element::Float;
use crate::error::{Error, Result};
use crate::nn::Parameters;
use crate::tensor::Tensor;

/// Scales every gradient of `model` by `min(1, max_norm / (‖g‖ + 1e-6))`, `‖g‖` the L2 norm
/// of all gradients together, and returns `‖g‖` as a 0-d tensor on the model's placement
/// (read it with `.item()` when wanted: computing it does not wait for the device).
/// `None` if no parameter has a gradient.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Cuda, Param, Tensor};
/// let w = Param::new(Tensor::<Cuda<0>>::from_vec(vec![3.0, 4.0], [2])?);
/// (&*w * &w.detach())?.sum()?.backward()?; // gradient (3, 4), norm 5
/// let norm = locus::optim::clip_grad_norm(&w, 1.0)?.unwrap();
/// assert_eq!(norm.item()?, 5.0);
/// let g = w.grad().unwrap().to_vec()?;
/// assert!((g[0] - 0.6).abs() < 1e-5 && (g[1] - 0.8).abs() < 1e-5);
/// # Ok::<(), locus::Error>(())
/// ```
pub fn clip_grad_norm<D: Device, T: Float>(
    model: &impl Parameters<D, T>,
    max_norm: f64,
) -> Result<Option<Tensor<D, T>>> {
    let _off = no_grad();
    let mut params = Vec::new();
    let mut grads = Vec::new();
    model.visit_params("", &mut |_, p| {
        if let Some(g) = p.grad() {
            params.push(p.clone());
            grads.push(g);
        }
    });
    if grads.is_empty() {
        return Ok(None);
    }
    if !grads.iter().all(|g| matches!(g.placement().id(), DeviceId::Cuda(_))) {
        return by_ops(&params, &grads, max_norm).map(Some);
    }
    // The parameters let go of their gradients, so that the kernel scales them in place
    // (one the caller holds too is copied first, and the caller's keeps its values); they
    // get them back whatever happens.
    params.iter().for_each(|p| p.zero_grad());
    let clipped = multi::norm_and_coef(&grads, max_norm).and_then(|(norm, coef)| {
        multi::scale(&mut grads, &coef)?;
        Ok(norm)
    });
    let mut restored = Ok(());
    for (p, g) in params.iter().zip(grads) {
        restored = restored.and(p.set_grad(Some(g)));
    }
    restored?;
    clipped.map(Some)
}

/// The same with tensor ops, for gradients in host memory (a CUDA kernel cannot run
/// there): a sum of squares per gradient, their total, and a product per gradient.
fn by_ops<D: Device, T: Float>(params: &[Param<D, T>], grads: &[Tensor<D, T>], max_norm: f64) -> Result<Tensor<D, T>> {
    let mut total: Option<Tensor<D, T>> = None;
    for g in grads {
        let sq = g.sum_squares()?;
        total = Some(match total {
            None => sq,
            Some(acc) => (&acc + &sq)?,
        });
    }
    let norm =
        total.ok_or_else(|| Error::InvalidArgument { op: "clip_grad_norm", reason: "no gradient".into() })?.sqrt()?;
    // min(1, max_norm / (norm + 1e-6)), on the device.
    let coef = norm.shifted(1e-6)?.scalar_lhs(BinaryOp::Div, T::from_f64(max_norm))?.clamp(T::ZERO, T::ONE)?;
    for (p, g) in params.iter().zip(grads) {
        p.set_grad(Some((g * &coef)?))?;
    }
    Ok(norm)
}
