//! `LayerNorm`: each row normalised over its last dim, then scaled and shifted by
//! learned `weight` and `bias` (PyTorch's `nn.LayerNorm(dim)`): one kernel forward and two
//! backward (`Tensor::layer_norm`), the weight and bias applied in the forward's kernel.

use super::params::{join, Parameters};
use crate::autograd::Param;
use crate::device::{Device, StaticDevice};
use crate::element::Float;
use crate::error::{Error, Result};
use crate::parallel::Module;
use crate::tensor::Tensor;
use crate::to_device::ToDevice;

/// `(x − mean) / √(var + eps) · weight + bias` over the last dim (biased variance, as
/// PyTorch's); `weight` starts at 1, `bias` at 0.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::nn::{LayerNorm, Module};
/// use locus::{Cuda, Tensor};
/// let norm = LayerNorm::<Cuda<0>>::new(4)?;
/// let y = norm.forward(&Tensor::from_vec(vec![1.0, 2.0, 3.0, 4.0], [1, 4])?)?;
/// let v = y.to_vec()?;
/// assert!((v.iter().sum::<f32>()).abs() < 1e-5 && (v[3] - 1.3416).abs() < 1e-3);
/// # Ok::<(), locus::Error>(())
/// ```
pub struct LayerNorm<D: Device, T: Float = f32> {
    /// `[dim]`, starting at 1.
    pub weight: Param<D, T>,
    /// `[dim]`, starting at 0.
    pub bias: Param<D, T>,
    /// Added to the variance (1e-5 by default).
    pub eps: f64,
}

impl<D: StaticDevice, T: Float> LayerNorm<D, T> {
    /// A layer norm over a last dim of `dim`.
    pub fn new(dim: usize) -> Result<Self> {
        Self::new_on(D::resolve()?, dim)
    }
}

impl<D: Device, T: Float> LayerNorm<D, T> {
    /// [`new`](Self::new) on a run-time placement.
    pub fn new_on(device: D, dim: usize) -> Result<Self> {
        Ok(LayerNorm {
            weight: Param::new(Tensor::ones_on(device, [dim])?),
            bias: Param::new(Tensor::zeros_on(device, [dim])?),
            eps: 1e-5,
        })
    }
}

impl<D: Device, T: Float> Module<D, T> for LayerNorm<D, T> {
    fn forward(&self, x: &Tensor<D, T>) -> Result<Tensor<D, T>> {
        let dim = x.rank().checked_sub(1).ok_or_else(|| Error::InvalidArgument {
            op: "LayerNorm",
            reason: "a 0-d tensor has no dim to normalise".into(),
        })?;
        if x.shape()[dim] != self.weight.numel() {
            return Err(Error::ShapeMismatch {
                op: "LayerNorm",
                lhs: x.shape().to_vec(),
                rhs: self.weight.shape().to_vec(),
            });
        }
        x.layer_norm(Some((&self.weight, &self.bias)), self.eps)
    }
}

impl<D: Device, T: Float> Parameters<D, T> for LayerNorm<D, T> {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Param<D, T>)) {
        self.weight.visit_params(&join(prefix, "weight"), f);
        self.bias.visit_params(&join(prefix, "bias"), f);
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Param<D, T>)) {
        self.weight.visit_params_mut(&join(prefix, "weight"), f);
        self.bias.visit_params_mut(&join(prefix, "bias"), f);
    }
}

impl<D: Device, T: Float> ToDevice for LayerNorm<D, T> {
    type On<E: Device> = LayerNorm<E, T>;
    fn to_placement<E: Device>(&self, placement: E) -> Result<LayerNorm<E, T>> {
        Ok(LayerNorm {
            weight: self.weight.to_placement(placement)?,
            bias: self.bias.to_placement(placement)?,
            eps: self.eps,
        })
    }
}
