//! The small tensor expressions that backward rules are written in: a gradient summed
//! back to its input's shape over broadcast dims, products with a scalar, masks as
//! factors, and moving a gradient to the placement type of its input.

use crate::backend::{BinaryOp, Blocks};
use crate::device::Device;
use crate::element::Element;
use crate::error::Result;
use crate::tensor::Tensor;

impl<D: Device, T: Element> Tensor<D, T> {
    /// This gradient summed over the dims that broadcasting added or stretched, to
    /// `shape` (the input's).
    pub(crate) fn sum_to(&self, shape: &[usize]) -> Result<Self> {
        if self.shape() == shape {
            return Ok(self.clone());
        }
        // The dims broadcasting added in front, folded into one dim and summed by one
        // reduction (a bias's gradient: [batch, tokens, width] as [batch · tokens, width],
        // which the GPU sums in tiles of columns).
        let extra = self.rank() - shape.len().min(self.rank());
        let mut g = match extra {
            0 => self.clone(),
            _ => {
                let mut folded = vec![self.shape()[..extra].iter().product::<usize>()];
                folded.extend_from_slice(&self.shape()[extra..]);
                self.reshape(&folded)?.sum_dim(0, false)?
            }
        };
        for (d, &n) in shape.iter().enumerate() {
            if n == 1 && g.shape()[d] != 1 {
                g = g.sum_dim(d, true)?;
            }
        }
        g.reshape(shape)
    }

    /// This gradient broadcast to `shape` (the input of a reduction); `self` has the
    /// reduction's shape with its dims kept.
    pub(crate) fn expand_to(&self, shape: &[usize]) -> Result<Self> {
        Tensor::zeros_on(self.placement(), shape)?.binary(BinaryOp::Add, self)
    }

    /// The gradient `g` of a reduction over `dim` (`None`: all dims) back at `shape`.
    pub(crate) fn unreduce(&self, shape: &[usize], dim: Option<usize>) -> Result<Self> {
        let kept: Vec<usize> = match dim {
            Some(d) => shape.iter().enumerate().map(|(i, &n)| if i == d { 1 } else { n }).collect(),
            None => vec![1; shape.len()],
        };
        self.reshape(&kept)?.expand_to(shape)
    }

    /// This gradient of a slice `start..start + len` along `dim` placed in zeros of
    /// `size` along `dim` (the gradient of `narrow`, `select`, `chunk`).
    pub(crate) fn padded(&self, dim: usize, start: usize, size: usize) -> Result<Self> {
        let len = self.shape()[dim];
        if len == size {
            return Ok(self.clone());
        }
        let mut shape = self.shape().to_vec();
        shape[dim] = size;
        let (outer, inner) = (shape[..dim].iter().product::<usize>(), shape[dim + 1..].iter().product::<usize>());
        // One part: this gradient's runs at their places, zeros around them (one kernel).
        let part = Blocks {
            src: self.buffer(),
            src_offset: 0,
            src_stride: len * inner,
            dst_offset: start * inner,
            dst_stride: size * inner,
            count: outer,
            block: len * inner,
        };
        let n = outer * size * inner;
        self.assembled("narrow", shape, n, &[part])
    }

    /// `self * v`.
    pub(crate) fn scaled(&self, v: f64) -> Result<Self> {
        self.binary_scalar(BinaryOp::Mul, T::from_f64(v))
    }

    /// `self + v`.
    pub(crate) fn shifted(&self, v: f64) -> Result<Self> {
        self.binary_scalar(BinaryOp::Add, T::from_f64(v))
    }

    /// `v - self`.
    pub(crate) fn rsub(&self, v: f64) -> Result<Self> {
        self.scalar_lhs(BinaryOp::Sub, T::from_f64(v))
    }

    /// `self * other` (same device, any placement types).
    pub(crate) fn times<E: Device>(&self, other: &Tensor<E, T>) -> Result<Self> {
        self.binary(BinaryOp::Mul, other)
    }

    /// `self / other` (same device, any placement types).
    pub(crate) fn over<E: Device>(&self, other: &Tensor<E, T>) -> Result<Self> {
        self.binary(BinaryOp::Div, other)
    }

    /// `self` where `mask` is 1, zero elsewhere.
    pub(crate) fn masked<E: Device>(&self, mask: &Tensor<E, u8>) -> Result<Self> {
        self.binary(BinaryOp::Mul, &mask.to_dtype::<T>()?)
    }

    /// The same gradient typed for the input's placement `E` (one device at run time:
    /// shares the memory).
    pub(crate) fn placed<E: Device>(&self, at: E) -> Result<Tensor<E, T>> {
        self.copy_to(at)
    }
}
