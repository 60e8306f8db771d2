//! Adding and removing dims of 1: `unsqueeze` and `squeeze`. Both are a [`Tensor::reshape`]
//! (no copy), so autograd follows through reshape's rule.

use super::Tensor;
use crate::device::Device;
use crate::element::Element;
use crate::error::{Error, Result};

impl<D: Device, T: Element> Tensor<D, T> {
    /// The same elements with a new dim of 1 at `dim`, which may be `0..=rank` (PyTorch's
    /// `unsqueeze`, without negative dims); no copy.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu>::zeros([2, 3])?;
    /// assert_eq!(t.unsqueeze(0)?.shape(), &[1, 2, 3]);
    /// assert_eq!(t.unsqueeze(1)?.shape(), &[2, 1, 3]);
    /// assert_eq!(t.unsqueeze(2)?.shape(), &[2, 3, 1]);
    /// assert!(t.unsqueeze(3).is_err());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn unsqueeze(&self, dim: usize) -> Result<Self> {
        if dim > self.rank() {
            return Err(Error::InvalidArgument {
                op: "unsqueeze",
                reason: format!(
                    "dim {dim} is out of range (allowed: 0..={}) for a tensor of shape {:?}",
                    self.rank(),
                    self.shape()
                ),
            });
        }
        let mut shape = self.shape().to_vec();
        shape.insert(dim, 1);
        self.reshape(shape)
    }

    /// The same elements without `dim` where it is 1; a dim of another size leaves the
    /// tensor as it is, as PyTorch's `squeeze(dim)` does. A `dim` past the last is an
    /// error; a 0-d tensor takes `dim` 0 and stays as it is. No copy.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu>::zeros([2, 1, 3])?;
    /// assert_eq!(t.squeeze(1)?.shape(), &[2, 3]);
    /// assert_eq!(t.squeeze(0)?.shape(), &[2, 1, 3]);
    /// assert!(t.squeeze(3).is_err());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn squeeze(&self, dim: usize) -> Result<Self> {
        if self.rank() == 0 && dim == 0 {
            return Ok(self.clone());
        }
        self.check_dim("squeeze", dim)?;
        if self.shape()[dim] != 1 {
            return Ok(self.clone());
        }
        let mut shape = self.shape().to_vec();
        shape.remove(dim);
        self.reshape(shape)
    }
}
