//! Named ops: activations, reductions, concatenation, chunking.

use std::marker::PhantomData;

use super::Tensor;
use crate::backend::{Buffer, ReduceOp, UnaryOp};
use crate::device::Device;
use crate::element::{Element, Float};
use crate::error::{Error, Result};
use crate::placement::SamePlacement;
use crate::shape::{self, Reduction, Shape};

impl<D: Device, T: Element> Tensor<D, T> {
    /// `max(x, 0)` elementwise.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu>::from_vec(vec![-1.0, 2.0], [2])?;
    /// assert_eq!(t.relu()?.to_vec()?, vec![0.0, 2.0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn relu(&self) -> Result<Self> {
        self.unary(UnaryOp::Relu)
    }

    /// The elements converted to `U`, on the same device (PyTorch's `.to(dtype)`). Float
    /// to integer truncates toward zero and saturates, NaN becomes 0; integer to integer
    /// wraps (as Rust's `as`); to a float type rounds to nearest, ties to even, once. The
    /// same type gives a tensor sharing this one's memory (copy-on-write), as PyTorch
    /// returns `self`.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{bf16, Cpu, Tensor};
    /// let t = Tensor::<Cpu>::from_vec(vec![1.0, 2.5, -3.7, 1e9], [4])?;
    /// assert_eq!(t.to_dtype::<i32>()?.to_vec()?, vec![1, 2, -3, 1_000_000_000]);
    /// let h = t.to_dtype::<bf16>()?;
    /// assert_eq!(h.to_vec()?[1], bf16::from_f32(2.5));
    /// assert_eq!(h.to_dtype::<f32>()?.to_vec()?[3], 998_244_352.0); // 8 bits of mantissa
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn to_dtype<U: Element>(&self) -> Result<Tensor<D, U>> {
        if let Ok(same) = self.clone().retyped::<U>() {
            return Ok(same);
        }
        let buf = self.buffer().cast(T::DTYPE, U::DTYPE, self.numel())?;
        let shape = Shape::new("to_dtype", self.shape.to_vec(), U::DTYPE)?;
        Ok(Tensor::from_buffer(self.placement(), buf, shape))
    }

    pub(super) fn reduce(&self, op: ReduceOp, r: Reduction, shape: Shape) -> Result<Self> {
        let buf = self.buffer().reduce(op, T::DTYPE, r)?;
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
        self.reduce(ReduceOp::Sum, Reduction::all(self.numel()), Shape::scalar())
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
        self.reduce(ReduceOp::Sum, Reduction::over("sum_dim", &self.shape, dim)?, shape)
    }

    /// The largest element, as a 0-d tensor; an empty tensor is an error. NaN wins.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu, i32>::from_vec(vec![3, -7, 5], [3])?;
    /// assert_eq!(t.max()?.item()?, 5);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn max(&self) -> Result<Self> {
        if self.numel() == 0 {
            return Err(Error::InvalidArgument { op: "max", reason: "an empty tensor has no maximum".into() });
        }
        self.reduce(ReduceOp::Max, Reduction::all(self.numel()), Shape::scalar())
    }

    pub(super) fn check_dim(&self, op: &'static str, dim: usize) -> Result<()> {
        if dim >= self.rank() {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("dim {dim} is out of range for a tensor of shape {:?}", self.shape()),
            });
        }
        Ok(())
    }

    pub(super) fn check_rank(&self, op: &'static str, rank: usize) -> Result<()> {
        if self.rank() != rank {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("needs a {rank}-d tensor, got shape {:?}", self.shape()),
            });
        }
        Ok(())
    }

    /// `self` followed by `rhs` along dim 0; the other dims must agree.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let a = Tensor::<Cuda<0>>::zeros([1, 2])?;
    /// let b = Tensor::<Cuda<0>>::ones([2, 2])?;
    /// assert_eq!(a.cat(&b)?.to_vec()?, vec![0.0, 0.0, 1.0, 1.0, 1.0, 1.0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn cat<E: Device>(&self, rhs: &Tensor<E, T>) -> Result<Self>
    where
        D: SamePlacement<E>,
    {
        let rhs = self.seen_here("cat", rhs)?;
        Self::concat(&[self, &rhs])
    }

    /// `rhs`, checked at run time to be on this tensor's device, under this placement
    /// (for two-tensor ops whose placements the compiler already matched).
    pub(super) fn seen_here<E: Device>(&self, op: &'static str, rhs: &Tensor<E, T>) -> Result<Self> {
        self.same_device(op, rhs)?;
        Ok(Tensor {
            storage: rhs.storage.clone(),
            shape: rhs.shape.clone(),
            placement: self.placement,
            _elem: PhantomData,
        })
    }

    /// The tensors one after another along dim 0 (PyTorch's `torch.cat(list)`); all
    /// on one device, with equal trailing dims.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let parts = [Tensor::<Cpu>::ones([1])?, Tensor::<Cpu>::zeros([2])?];
    /// let all = Tensor::concat(&[&parts[0], &parts[1]])?;
    /// assert_eq!(all.to_vec()?, vec![1.0, 0.0, 0.0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn concat(parts: &[&Self]) -> Result<Self> {
        let Some(first) = parts.first() else {
            return Err(Error::InvalidArgument { op: "cat", reason: "no tensors to concatenate".into() });
        };
        first.check_nonscalar("cat")?;
        let mut rows = Some(0usize);
        for p in parts {
            first.same_device("cat", p)?;
            p.check_nonscalar("cat")?;
            if p.shape[1..] != first.shape[1..] {
                return Err(Error::ShapeMismatch { op: "cat", lhs: first.shape.to_vec(), rhs: p.shape.to_vec() });
            }
            rows = rows.and_then(|r| r.checked_add(p.shape[0]));
        }
        let inputs: Vec<&[usize]> = parts.iter().map(|p| p.shape()).collect();
        let Some(rows) = rows else {
            return Err(Error::InvalidArgument {
                op: "cat",
                reason: format!("the result of {} would have more than usize::MAX rows", shape::operands(&inputs)),
            });
        };
        let mut shape = first.shape.to_vec();
        shape[0] = rows;
        // The parts' element counts add up to the result's, which is checked here.
        let out = Shape::result("cat", shape, T::DTYPE, &inputs)?;
        let bufs: Vec<_> = parts.iter().map(|p| (p.buffer(), p.numel())).collect();
        let buf = Buffer::concat(T::DTYPE, &bufs)?;
        Ok(first.with_buffer(buf, out))
    }

    fn check_nonscalar(&self, op: &'static str) -> Result<()> {
        if self.rank() == 0 {
            return Err(Error::InvalidArgument { op, reason: "a 0-d tensor has no dim 0".into() });
        }
        Ok(())
    }

    /// Splits along dim 0 into at most `n` pieces of `ceil(len / n)` rows, the last one
    /// smaller if need be (PyTorch's `chunk`).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu, i32>::arange(0, 5, 1)?;
    /// let parts: Vec<Vec<i32>> = t.chunk(2)?.iter().map(|p| p.to_vec()).collect::<Result<_, _>>()?;
    /// assert_eq!(parts, vec![vec![0, 1, 2], vec![3, 4]]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn chunk(&self, n: usize) -> Result<Vec<Self>> {
        self.check_nonscalar("chunk")?;
        if n == 0 {
            return Err(Error::InvalidArgument { op: "chunk", reason: "cannot split into 0 chunks".into() });
        }
        let len = self.shape[0];
        let step = len.div_ceil(n).max(1);
        let row = shape::product("chunk", &self.shape[1..])?;
        // Rows of no elements cost no memory, so only the list itself bounds their count.
        let parts = len.div_ceil(step);
        let mut out = Vec::new();
        out.try_reserve_exact(parts).map_err(|_| Error::InvalidArgument {
            op: "chunk",
            reason: format!("{n} chunks of shape {:?} are {parts} tensors, more than memory holds", self.shape()),
        })?;
        let mut start = 0;
        while start < len {
            let rows = step.min(len - start);
            let mut shape = self.shape.to_vec();
            shape[0] = rows;
            let shape = Shape::new("chunk", shape, T::DTYPE)?;
            let offset = shape::mul("chunk", start, row)?;
            let buf = self.buffer().slice(T::DTYPE, offset, shape.numel())?;
            out.push(self.with_buffer(buf, shape));
            start += rows;
        }
        Ok(out)
    }
}

impl<D: Device, T: Float> Tensor<D, T> {
    /// `e^x` elementwise.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// assert_eq!(Tensor::<Cpu>::zeros([1])?.exp()?.to_vec()?, vec![1.0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn exp(&self) -> Result<Self> {
        self.unary(UnaryOp::Exp)
    }

    /// The square root elementwise (NaN for negative values).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// assert_eq!(Tensor::<Cpu>::full([1], 9.0)?.sqrt()?.to_vec()?, vec![3.0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn sqrt(&self) -> Result<Self> {
        self.unary(UnaryOp::Sqrt)
    }

    /// The mean of all elements, as a 0-d tensor (NaN for an empty tensor, as in PyTorch).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// assert_eq!(Tensor::<Cpu>::arange(1.0, 5.0, 1.0)?.mean()?.item()?, 2.5);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn mean(&self) -> Result<Self> {
        self.reduce(ReduceOp::Mean, Reduction::all(self.numel()), Shape::scalar())
    }
}
