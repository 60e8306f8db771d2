//! `Linear`: `y = x Wᵀ + b` (PyTorch's `nn.Linear`, the same layout of `weight`, so state
//! dicts load either way).

use super::init::{derive_seed, fan_in_uniform_on};
use super::params::{join, Parameters};
use crate::autograd::Param;
use crate::device::{Device, StaticDevice};
use crate::element::Float;
use crate::error::Result;
use crate::parallel::Module;
use crate::placement::SamePlacement;
use crate::tensor::Tensor;
use crate::to_device::ToDevice;

/// A fully connected layer: `weight` is `[out, in]`, `bias` `[out]`; inputs `[.., in]`
/// (2-d or 3-d) give `[.., out]`. Both start uniform in `±1/√in`, as PyTorch's.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::nn::{Linear, Module};
/// use locus::{Cuda, Tensor};
/// let layer = Linear::<Cuda<0>>::new(4, 2, 7)?;
/// let y = layer.forward(&Tensor::ones([3, 4])?)?;
/// assert_eq!(y.shape(), &[3, 2]);
/// y.sum()?.backward()?;
/// assert_eq!(layer.weight.grad().unwrap().shape(), &[2, 4]);
/// # Ok::<(), locus::Error>(())
/// ```
pub struct Linear<D: Device, T: Float = f32> {
    /// `[out, in]`.
    pub weight: Param<D, T>,
    /// `[out]`, if the layer has one.
    pub bias: Option<Param<D, T>>,
}

impl<D: StaticDevice, T: Float> Linear<D, T> {
    /// A layer from `inputs` to `outputs` features with a bias, its values from `seed`.
    pub fn new(inputs: usize, outputs: usize, seed: u64) -> Result<Self> {
        Self::new_on(D::resolve()?, inputs, outputs, seed)
    }
}

impl<D: Device, T: Float> Linear<D, T> {
    /// [`new`](Self::new) on a run-time placement.
    pub fn new_on(device: D, inputs: usize, outputs: usize, seed: u64) -> Result<Self> {
        let weight = Param::new(fan_in_uniform_on(device, [outputs, inputs], inputs, seed)?);
        let bias = Param::new(fan_in_uniform_on(device, [outputs], inputs, derive_seed(seed, 1))?);
        Ok(Linear { weight, bias: Some(bias) })
    }

    /// The layer without its bias (`bias=False`).
    pub fn without_bias(mut self) -> Self {
        self.bias = None;
        self
    }

    /// `x Wᵀ + b` for `x` on a placement that may meet this layer's.
    pub fn apply<E>(&self, x: &Tensor<E, T>) -> Result<Tensor<E, T>>
    where
        E: Device + SamePlacement<D>,
    {
        // x · Wᵀ, the weight read transposed in place by the GEMM (forward and backward).
        let y = x.matmul_nt(&*self.weight)?;
        match &self.bias {
            Some(b) => &y + &**b,
            None => Ok(y),
        }
    }
}

impl<D: Device, T: Float> Module<D, T> for Linear<D, T> {
    fn forward(&self, x: &Tensor<D, T>) -> Result<Tensor<D, T>> {
        self.apply(x)
    }
}

impl<D: Device, T: Float> Parameters<D, T> for Linear<D, T> {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Param<D, T>)) {
        self.weight.visit_params(&join(prefix, "weight"), f);
        self.bias.visit_params(&join(prefix, "bias"), f);
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Param<D, T>)) {
        self.weight.visit_params_mut(&join(prefix, "weight"), f);
        self.bias.visit_params_mut(&join(prefix, "bias"), f);
    }
}

impl<D: Device, T: Float> ToDevice for Linear<D, T> {
    type On<E: Device> = Linear<E, T>;
    fn to_placement<E: Device>(&self, placement: E) -> Result<Linear<E, T>> {
        Ok(Linear { weight: self.weight.to_placement(placement)?, bias: self.bias.to_placement(placement)? })
    }
}
