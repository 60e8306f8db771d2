//! `Sequential`: blocks applied in order (PyTorch's `nn.Sequential`), their parameters
//! named by position (`"0.weight"`, `"2.bias"`), as PyTorch's state dicts name them.

use super::params::{join, Parameters};
use crate::autograd::Param;
use crate::device::Device;
use crate::element::Float;
use crate::error::Result;
use crate::parallel::Module;
use crate::tensor::Tensor;

/// A block of a [`Sequential`]: a module with parameters, usable from any thread.
pub trait Layer<D: Device, T: Float = f32>: Module<D, T> + Parameters<D, T> + Send + Sync {}

impl<D: Device, T: Float, L: Module<D, T> + Parameters<D, T> + Send + Sync> Layer<D, T> for L {}

/// Blocks applied one after another, all on placement `D`.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::nn::{self, Linear, Module, Relu, Sequential};
/// use locus::{Cuda, Tensor};
/// let mlp = Sequential::<Cuda<0>>::new()
///     .append(Linear::new(4, 8, 1)?)
///     .append(Relu::new())
///     .append(Linear::new(8, 1, 2)?);
/// let y = mlp.forward(&Tensor::ones([5, 4])?)?;
/// assert_eq!(y.shape(), &[5, 1]);
/// let names: Vec<String> = nn::named_parameters(&mlp).into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias"]);
/// # Ok::<(), locus::Error>(())
/// ```
pub struct Sequential<D: Device, T: Float = f32> {
    layers: Vec<Box<dyn Layer<D, T>>>,
}

impl<D: Device, T: Float> Default for Sequential<D, T> {
    fn default() -> Self {
        Sequential { layers: Vec::new() }
    }
}

impl<D: Device, T: Float> Sequential<D, T> {
    /// No blocks yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// This container with `layer` last.
    pub fn append(mut self, layer: impl Layer<D, T> + 'static) -> Self {
        self.layers.push(Box::new(layer));
        self
    }

    /// The number of blocks.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether there are no blocks.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }
}

impl<D: Device, T: Float> Module<D, T> for Sequential<D, T> {
    fn forward(&self, x: &Tensor<D, T>) -> Result<Tensor<D, T>> {
        let mut y = x.clone();
        for layer in &self.layers {
            y = layer.forward(&y)?;
        }
        Ok(y)
    }
}

impl<D: Device, T: Float> Parameters<D, T> for Sequential<D, T> {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Param<D, T>)) {
        for (i, layer) in self.layers.iter().enumerate() {
            layer.visit_params(&join(prefix, &i.to_string()), f);
        }
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Param<D, T>)) {
        for (i, layer) in self.layers.iter_mut().enumerate() {
            layer.visit_params_mut(&join(prefix, &i.to_string()), f);
        }
    }
}
