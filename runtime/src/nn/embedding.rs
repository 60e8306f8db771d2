//! `Embedding`: a table of learned vectors looked up by index (PyTorch's `nn.Embedding`),
//! `index_select` along the table's rows, so its gradient is that op's.

use super::init::normal_on;
use super::params::{join, Parameters};
use crate::autograd::Param;
use crate::device::{Device, StaticDevice};
use crate::element::Float;
use crate::error::Result;
use crate::placement::SamePlacement;
use crate::tensor::Tensor;
use crate::to_device::ToDevice;

/// `num` vectors of `dim` values, normal with std 1 at the start (PyTorch's default).
/// Indices of any shape `[..]` give `[.., dim]`; an index out of range is an `Err`.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::nn::Embedding;
/// use locus::{Cuda, Tensor};
/// let emb = Embedding::<Cuda<0>>::new(10, 4, 0)?;
/// let ids = Tensor::<Cuda<0>, i32>::from_vec(vec![1, 3, 3, 9, 0, 2], [2, 3])?;
/// let v = emb.forward(&ids)?;
/// assert_eq!(v.shape(), &[2, 3, 4]);
/// v.sum()?.backward()?;
/// let g = emb.weight.grad().unwrap().to_vec()?;
/// assert_eq!(&g[12..16], &[2.0; 4]); // row 3 was looked up twice
/// assert!(emb.forward(&Tensor::<Cuda<0>, i32>::from_vec(vec![10], [1])?).is_err());
/// # Ok::<(), locus::Error>(())
/// ```
pub struct Embedding<D: Device, T: Float = f32> {
    /// `[num, dim]`.
    pub weight: Param<D, T>,
}

impl<D: StaticDevice, T: Float> Embedding<D, T> {
    /// A table of `num` vectors of `dim`, its values from `seed`.
    pub fn new(num: usize, dim: usize, seed: u64) -> Result<Self> {
        Self::new_on(D::resolve()?, num, dim, seed)
    }
}

impl<D: Device, T: Float> Embedding<D, T> {
    /// [`new`](Self::new) on a run-time placement.
    pub fn new_on(device: D, num: usize, dim: usize, seed: u64) -> Result<Self> {
        Ok(Embedding { weight: Param::new(normal_on(device, [num, dim], 1.0, seed)?) })
    }

    /// The vectors of `indices`, shape `indices.shape() + [dim]`.
    pub fn forward<E: Device>(&self, indices: &Tensor<E, i32>) -> Result<Tensor<D, T>>
    where
        D: SamePlacement<E>,
    {
        let dim = self.weight.shape()[1];
        let flat = indices.reshape([indices.numel()])?;
        let rows = self.weight.index_select(0, &flat)?;
        let mut shape = indices.shape().to_vec();
        shape.push(dim);
        rows.reshape(shape)
    }
}

impl<D: Device, T: Float> Parameters<D, T> for Embedding<D, T> {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Param<D, T>)) {
        self.weight.visit_params(&join(prefix, "weight"), f);
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Param<D, T>)) {
        self.weight.visit_params_mut(&join(prefix, "weight"), f);
    }
}

impl<D: Device, T: Float> ToDevice for Embedding<D, T> {
    type On<E: Device> = Embedding<E, T>;
    fn to_placement<E: Device>(&self, placement: E) -> Result<Embedding<E, T>> {
        Ok(Embedding { weight: self.weight.to_placement(placement)? })
    }
}
