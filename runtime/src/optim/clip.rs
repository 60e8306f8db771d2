//! Gradient clipping by global norm (PyTorch's `clip_grad_norm_`), without a host sync.

use crate::autograd::no_grad;
use crate::backend::BinaryOp;
use crate::device::Device;
use crate::element::Float;
use crate::error::Result;
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
    let mut total: Option<Result<Tensor<D, T>>> = None;
    model.visit_params("", &mut |_, p| {
        let Some(g) = p.grad() else { return };
        let sq = g.sum_squares();
        total = Some(match total.take() {
            None => sq,
            Some(acc) => acc.and_then(|a| sq.and_then(|s| &a + &s)),
        });
    });
    let Some(total) = total else { return Ok(None) };
    let norm = total?.sqrt()?;
    // min(1, max_norm / (norm + 1e-6)), on the device.
    let coef = norm.shifted(1e-6)?.scalar_lhs(BinaryOp::Div, T::from_f64(max_norm))?.clamp(T::ZERO, T::ONE)?;
    let mut result = Ok(());
    model.visit_params("", &mut |_, p| {
        if let (Some(g), Ok(())) = (p.grad(), &result) {
            result = (&g * &coef).and_then(|scaled| p.set_grad(Some(scaled)));
        }
    });
    result?;
    Ok(Some(norm))
}
