//! Reductions over one dim beyond `sum_dim`: `mean_dim`, `max_dim` (values and indices)
//! and `argmax`, each dropping the dim or, with `keepdim`, keeping it as a dim of 1, as
//! PyTorch's `keepdim=True` does.

use super::Tensor;
use crate::backend::ReduceOp;
use crate::device::Device;
use crate::element::{DType, Element, Float};
use crate::error::{Error, Result};
use crate::shape::{Reduction, Shape};

impl<D: Device, T: Element> Tensor<D, T> {
    /// The shape left after reducing `dim` (checked), of `dtype` elements: without the
    /// dim, or with it as 1 when `keepdim`.
    pub(super) fn reduced_shape(&self, op: &'static str, dim: usize, keepdim: bool, dtype: DType) -> Result<Shape> {
        self.check_dim(op, dim)?;
        let mut shape = self.shape.to_vec();
        if keepdim {
            shape[dim] = 1;
        } else {
            shape.remove(dim);
        }
        Shape::new(op, shape, dtype)
    }

    /// The indices of the first maxima over `dim` (see [`Tensor::max_dim`]), and with
    /// `values` the maxima.
    fn arg_reduce(
        &self,
        op: &'static str,
        dim: usize,
        keepdim: bool,
        values: bool,
    ) -> Result<(Tensor<D, i32>, Option<Self>)> {
        let idx_shape = self.reduced_shape(op, dim, keepdim, DType::I32)?;
        let len = self.shape[dim];
        if len == 0 || i32::try_from(len).is_err() {
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "dim {dim} of shape {:?} has {len} elements; a maximum needs 1 to i32::MAX (the index type)",
                    self.shape()
                ),
            });
        }
        let r = Reduction::over(op, &self.shape, dim)?;
        let (idx, vals) = self.buffer().argmax(T::DTYPE, r, values)?;
        let vals = match vals {
            Some(v) => Some(self.with_buffer(v, self.reduced_shape(op, dim, keepdim, T::DTYPE)?)),
            None => None,
        };
        Ok((Tensor::from_buffer(self.placement, idx, idx_shape), vals))
    }

    /// The largest elements over `dim` and their indices (PyTorch's `torch.max(x, dim,
    /// keepdim)`): the index is that of the first maximum, and NaN wins (the first NaN),
    /// so the value is always the element at the index. An empty `dim` is an error, as is
    /// one longer than `i32::MAX` (the index type).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let t = Tensor::<Cuda<0>>::from_vec(vec![1.0, 5.0, 5.0, 7.0, f32::NAN, 2.0], [2, 3])?;
    /// let (values, indices) = t.max_dim(1, false)?;
    /// assert_eq!(indices.to_vec()?, vec![1, 1]);
    /// let v = values.to_vec()?;
    /// assert!(v[0] == 5.0 && v[1].is_nan());
    /// let (_, cols) = t.max_dim(0, true)?;
    /// assert_eq!((cols.shape(), cols.to_vec()?), (&[1, 3][..], vec![1, 1, 0]));
    /// assert!(Tensor::<Cuda<0>>::zeros([2, 0])?.max_dim(1, false).is_err());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn max_dim(&self, dim: usize, keepdim: bool) -> Result<(Self, Tensor<D, i32>)> {
        let (idx, vals) = self.arg_reduce("max_dim", dim, keepdim, true)?;
        match vals {
            Some(v) => Ok((v, idx)),
            None => Err(Error::InvalidArgument { op: "max_dim", reason: "the backend returned no values".into() }),
        }
    }

    /// The index of the first largest element over `dim` (PyTorch's `argmax(dim,
    /// keepdim)`); NaN wins, the first NaN. An empty `dim` is an error.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let logits = Tensor::<Cpu, i32>::from_vec(vec![3, 9, 9, 0, -1, -5], [2, 3])?;
    /// assert_eq!(logits.argmax(1, false)?.to_vec()?, vec![1, 0]);
    /// assert_eq!(logits.argmax(0, true)?.shape(), &[1, 3]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn argmax(&self, dim: usize, keepdim: bool) -> Result<Tensor<D, i32>> {
        Ok(self.arg_reduce("argmax", dim, keepdim, false)?.0)
    }
}

impl<D: Device, T: Float> Tensor<D, T> {
    /// The mean over `dim`, dropped or kept as 1 with `keepdim` (float types, as
    /// [`Tensor::mean`]); an empty `dim` gives NaN, as in PyTorch. Sums accumulate in f64.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu>::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3])?;
    /// assert_eq!(t.mean_dim(1, false)?.to_vec()?, vec![2.0, 5.0]);
    /// let m = t.mean_dim(0, true)?;
    /// assert_eq!((m.shape(), m.to_vec()?), (&[1, 3][..], vec![2.5, 3.5, 4.5]));
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn mean_dim(&self, dim: usize, keepdim: bool) -> Result<Self> {
        let shape = self.reduced_shape("mean_dim", dim, keepdim, T::DTYPE)?;
        self.reduce(ReduceOp::Mean, Reduction::over("mean_dim", &self.shape, dim)?, shape)
    }
}
