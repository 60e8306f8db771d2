//! Reductions: of all elements (`sum`, `max`, `min`, `mean`, `sum_squares`, each a 0-d tensor) and over
//! one dim (`sum_dim`, `mean_dim`, `max_dim` and `min_dim` (values and indices), `argmax`
//! and `argmin`), each of the latter dropping the dim or, with `keepdim`, keeping it as a
//! dim of 1, as PyTorch's `keepdim=True` does.
//!
//! The minima are the maxima of the elements under an order-reversing map that is exact
//! and its own inverse ([`Tensor::reversed`]), so `min` and `max` share their kernels,
//! their NaN rule and their choice among ties.

use super::Tensor;
use crate::backend::{BinaryOp, ReduceKind, UnaryOp};
use crate::device::Device;
use crate::element::{DType, Element, Float};
use crate::error::{Error, Result};
use crate::shape::{Reduction, Shape};

impl<D: Device, T: Element> Tensor<D, T> {
    pub(super) fn reduce(&self, op: ReduceKind, r: Reduction, shape: Shape) -> Result<Self> {
        let buf = self.queued("a reduction")?.reduce(op, T::DTYPE, r)?;
        Ok(self.with_buffer(buf, shape))
    }

    /// The sum of all elements, as a 0-d tensor on the same device (integers wrap).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let t = Tensor::<Cuda<0>, i32>::arange(1, 5, 1)?;
    /// assert_eq!(t.sum()?.item()?, 10);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn sum(&self) -> Result<Self> {
        let out = self.reduce(ReduceKind::Sum, Reduction::all(self.numel()), Shape::scalar())?;
        Ok(self.track1(out, "sum", |_| {
            let shape = self.shape.clone();
            move |g: Tensor<_, _>| g.unreduce(&shape, None)
        }))
    }

    /// Sums over `dim` (integers wrap), which is removed from the shape, or kept as a dim
    /// of 1 with `keepdim` (PyTorch's `sum(dim, keepdim)`).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu>::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3])?;
    /// assert_eq!(t.sum_dim(0, false)?.to_vec()?, vec![5.0, 7.0, 9.0]);
    /// assert_eq!(t.sum_dim(1, false)?.to_vec()?, vec![6.0, 15.0]);
    /// let kept = t.sum_dim(1, true)?;
    /// assert_eq!((kept.shape(), kept.to_vec()?), (&[2, 1][..], vec![6.0, 15.0]));
    /// assert!(t.sum_dim(2, false).is_err());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn sum_dim(&self, dim: usize, keepdim: bool) -> Result<Self> {
        let shape = self.reduced_shape("sum_dim", dim, keepdim, T::DTYPE)?;
        let out = self.reduce(ReduceKind::Sum, Reduction::over("sum_dim", &self.shape, dim)?, shape)?;
        Ok(self.track1(out, "sum_dim", |_| {
            let shape = self.shape.clone();
            move |g: Tensor<_, _>| g.unreduce(&shape, Some(dim))
        }))
    }

    /// The largest element, as a 0-d tensor; an empty tensor is an error. NaN wins, and
    /// +0.0 is above -0.0 (IEEE 754-2019 `maximum`), so the GPU's parallel reduction gives
    /// the same bits as the host's in any order. ([`max_dim`](Self::max_dim) gives the
    /// first maximum element and its index instead, as PyTorch's.)
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu, i32>::from_vec(vec![3, -7, 5], [3])?;
    /// assert_eq!(t.max()?.item()?, 5);
    /// let zeros = Tensor::<Cpu>::from_vec(vec![-0.0, 0.0, -0.0], [3])?;
    /// assert!(zeros.max()?.item()?.is_sign_positive());
    /// assert!(zeros.min()?.item()?.is_sign_negative());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn max(&self) -> Result<Self> {
        if self.numel() == 0 {
            return Err(Error::InvalidArgument { op: "max", reason: "an empty tensor has no maximum".into() });
        }
        let out = self.reduce(ReduceKind::Max, Reduction::all(self.numel()), Shape::scalar())?;
        Ok(self.extremum_tracked(out, "max"))
    }

    /// The smallest element, as a 0-d tensor; an empty tensor is an error. NaN wins, as
    /// in PyTorch, and -0.0 is below +0.0 (as in [`max`](Self::max)). The gradient is
    /// shared evenly among the elements equal to the minimum.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu, i32>::from_vec(vec![3, i32::MIN, 5], [3])?;
    /// assert_eq!(t.min()?.item()?, i32::MIN);
    /// assert_eq!(Tensor::<Cpu, u8>::from_vec(vec![7, 0, 255], [3])?.min()?.item()?, 0);
    /// assert!(Tensor::<Cpu>::zeros([0])?.min().is_err());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn min(&self) -> Result<Self> {
        if self.numel() == 0 {
            return Err(Error::InvalidArgument { op: "min", reason: "an empty tensor has no minimum".into() });
        }
        let reversed = self.saved().reversed()?;
        let out = reversed.reduce(ReduceKind::Max, Reduction::all(self.numel()), Shape::scalar())?.reversed()?;
        Ok(self.extremum_tracked(out, "min"))
    }

    /// `out`, the maximum or minimum `m` of all elements, with the gradient shared evenly
    /// among the elements equal to `m`, as PyTorch's.
    fn extremum_tracked(&self, out: Self, op: &'static str) -> Self {
        self.track1(out, op, |out| {
            let (x, m) = (self.saved(), out.saved());
            {
                move |g: Tensor<_, _>| {
                    let mask = x.eq(&m)?.to_dtype::<T>()?;
                    let share = g.over(&mask.sum()?)?;
                    mask.times(&share)
                }
            }
        })
    }

    /// The elements under an order-reversing map that is exact and its own inverse: `-x`
    /// for floats (NaN stays NaN, ±0 swap and compare equal), and all-ones minus `x` for
    /// integers (`!x`: `-1 - x` never overflows an i32 or i64, `255 - x` never a u8, where `-x`
    /// would wrap at `i32::MIN` and for every u8 but 0). Not tracked: the callers track.
    fn reversed(&self) -> Result<Self> {
        match T::DTYPE {
            DType::I32 | DType::I64 => self.saved().scalar_lhs(BinaryOp::Sub, T::from_f64(-1.0)),
            DType::U8 => self.saved().scalar_lhs(BinaryOp::Sub, T::from_f64(255.0)),
            _ => self.saved().unary(UnaryOp::Neg),
        }
    }

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
    /// `values` the maxima; `op` names the caller in errors.
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
                    "dim {dim} of shape {:?} has {len} elements; {op} needs 1 to i32::MAX (the index type)",
                    self.shape()
                ),
            });
        }
        let r = Reduction::over(op, &self.shape, dim)?;
        let (idx, vals) = self.queued("argmax")?.argmax(T::DTYPE, r, values)?;
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
        let v = vals
            .ok_or_else(|| Error::InvalidArgument { op: "max_dim", reason: "the backend returned no values".into() })?;
        Ok((self.picked_tracked(v, "max_dim", dim, &idx), idx))
    }

    /// The smallest elements over `dim` and their indices (PyTorch's `torch.min(x, dim,
    /// keepdim)`): the index is that of the first minimum, and NaN wins (the first NaN),
    /// so the value is the element at the index (a NaN possibly with another payload: the
    /// GPU's negation keeps none). Exact for every element type,
    /// `i32::MIN` and `u8` 0 included. An empty `dim` is an error, as is one longer than
    /// `i32::MAX` (the index type). The gradient goes to the element each index names.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let t = Tensor::<Cuda<0>>::from_vec(vec![4.0, 1.0, 1.0, 7.0, f32::NAN, -2.0], [2, 3])?;
    /// let (values, indices) = t.min_dim(1, false)?;
    /// assert_eq!(indices.to_vec()?, vec![1, 1]);
    /// let v = values.to_vec()?;
    /// assert!(v[0] == 1.0 && v[1].is_nan());
    /// let (vals, cols) = t.min_dim(0, true)?;
    /// assert_eq!((cols.shape(), cols.to_vec()?), (&[1, 3][..], vec![0, 1, 1]));
    /// assert!(vals.to_vec()?[1].is_nan());
    /// assert!(Tensor::<Cuda<0>>::zeros([2, 0])?.min_dim(1, false).is_err());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn min_dim(&self, dim: usize, keepdim: bool) -> Result<(Self, Tensor<D, i32>)> {
        let (idx, vals) = self.saved().reversed()?.arg_reduce("min_dim", dim, keepdim, true)?;
        let v = vals
            .ok_or_else(|| Error::InvalidArgument { op: "min_dim", reason: "the backend returned no values".into() })?;
        Ok((self.picked_tracked(v.reversed()?, "min_dim", dim, &idx), idx))
    }

    /// `out`, the elements of this tensor that `idx` picks along `dim`, with the gradient
    /// going to the element each index names.
    fn picked_tracked(&self, out: Self, op: &'static str, dim: usize, idx: &Tensor<D, i32>) -> Self {
        self.track1(out, op, |_| {
            let (shape, at) = (self.shape.clone(), idx.saved());
            {
                move |g: Tensor<_, _>| {
                    let mut line = vec![1; shape.len()];
                    line[dim] = shape[dim];
                    let len = i32::try_from(shape[dim])
                        .map_err(|_| Error::InvalidArgument { op, reason: "dim too long".into() })?;
                    let positions = Tensor::<D, i32>::arange_on(at.placement(), 0, len, 1)?.reshape(&line)?;
                    let mut kept = shape.to_vec();
                    kept[dim] = 1;
                    let hit = positions.eq(&at.reshape(&kept)?)?;
                    g.reshape(&kept)?.expand_to(&shape)?.masked(&hit)
                }
            }
        })
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

    /// The index of the first smallest element over `dim` (PyTorch's `argmin(dim,
    /// keepdim)`); NaN wins, the first NaN. An empty `dim` is an error.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu, u8>::from_vec(vec![3, 0, 0, 255, 9, 200], [2, 3])?;
    /// assert_eq!(t.argmin(1, false)?.to_vec()?, vec![1, 1]);
    /// assert_eq!(t.argmin(0, true)?.shape(), &[1, 3]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn argmin(&self, dim: usize, keepdim: bool) -> Result<Tensor<D, i32>> {
        Ok(self.saved().reversed()?.arg_reduce("argmin", dim, keepdim, false)?.0)
    }
}

impl<D: Device, T: Float> Tensor<D, T> {
    /// The mean of all elements, as a 0-d tensor (NaN for an empty tensor, as in PyTorch).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// assert_eq!(Tensor::<Cpu>::arange(1.0, 5.0, 1.0)?.mean()?.item()?, 2.5);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn mean(&self) -> Result<Self> {
        let out = self.reduce(ReduceKind::Mean, Reduction::all(self.numel()), Shape::scalar())?;
        Ok(self.track1(out, "mean", |_| {
            let shape = self.shape.clone();
            {
                move |g: Tensor<_, _>| g.scaled(1.0 / shape.numel() as f64)?.unreduce(&shape, None)
            }
        }))
    }

    /// The sum of the squares of all elements (the squared L2 norm), as a 0-d tensor, in
    /// one read: the squares are never stored, and the sum accumulates in f64. Gradient
    /// clipping takes it of every gradient.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu>::from_vec(vec![1.0, -2.0, 3.0], [3])?;
    /// assert_eq!(t.sum_squares()?.item()?, 14.0);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn sum_squares(&self) -> Result<Self> {
        let out = self.reduce(ReduceKind::SumSquares, Reduction::all(self.numel()), Shape::scalar())?;
        Ok(self.track1(out, "sum_squares", |_| {
            let x = self.saved();
            move |g: Tensor<_, _>| x.times(&g.scaled(2.0)?)
        }))
    }

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
        let out = self.reduce(ReduceKind::Mean, Reduction::over("mean_dim", &self.shape, dim)?, shape)?;
        Ok(self.track1(out, "mean_dim", |_| {
            let shape = self.shape.clone();
            {
                move |g: Tensor<_, _>| g.scaled(1.0 / shape[dim] as f64)?.unreduce(&shape, Some(dim))
            }
        }))
    }
}
