//! The small tensor expressions that backward rules are written in: a gradient summed
//! back to its input's shape over broadcast dims, products with a scalar, masks as
//! factors, and moving a gradient to the placement type of its input.

use crate::backend::BinaryOp;
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
        let zeros = |n: usize| {
            let mut s = self.shape().to_vec();
            s[dim] = n;
            Tensor::zeros_on(self.placement(), s)
        };
        // Zeros on the sides that have any (an empty part would still be an op).
        let (before, after) = (start, size - start - len);
        let (before, after) =
            ((before > 0).then(|| zeros(before)).transpose()?, (after > 0).then(|| zeros(after)).transpose()?);
        if before.is_none() && after.is_none() {
            return Ok(self.clone());
        }
        let parts: Vec<&Self> = before.iter().chain([self]).chain(after.iter()).collect();
        Tensor::concat_dim(&parts, dim)
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
