//! Layout ops: concatenating along dim 0 (`cat`, `concat`) and chunking it (`chunk`), and
//! along any dim narrowing, selecting, concatenating and stacking. Those along any dim are
//! each a strided block copy (`Buffer::copy_blocks` of the backend): for a row-major tensor,
//! everything below a dim is one contiguous run, so a part is `count` blocks of one
//! size at a fixed stride.

use std::marker::PhantomData;

use super::Tensor;
use crate::backend::{Blocks, Buffer};
use crate::device::Device;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::placement::SamePlacement;
use crate::shape::{self, Shape};

impl<D: Device, T: Element> Tensor<D, T> {
    /// Elements `start..start + len` along `dim`, the other dims whole (PyTorch's
    /// `narrow`); a copy, or this tensor itself (a clone) for the whole dim. Columns of a
    /// matrix are `narrow(1, ..)`.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let t = Tensor::<Cuda<0>, i32>::arange(0, 6, 1)?.reshape([2, 3])?;
    /// let cols = t.narrow(1, 1, 2)?;
    /// assert_eq!(cols.shape(), &[2, 2]);
    /// assert_eq!(cols.to_vec()?, vec![1, 2, 4, 5]);
    /// assert!(t.narrow(1, 2, 2).is_err());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn narrow(&self, dim: usize, start: usize, len: usize) -> Result<Self> {
        if dim < self.rank() && start == 0 && len == self.shape[dim] {
            return Ok(self.clone());
        }
        self.narrowed("narrow", dim, start, len)
    }

    /// The slice at `index` along `dim`, which is removed from the shape (PyTorch's
    /// `select`); a copy. Column `j` of a matrix is `select(1, j)`.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu, i32>::arange(0, 6, 1)?.reshape([2, 3])?;
    /// assert_eq!(t.select(1, 2)?.to_vec()?, vec![2, 5]);
    /// assert_eq!(t.select(0, 1)?.shape(), &[3]);
    /// assert!(t.select(0, 2).is_err());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn select(&self, dim: usize, index: usize) -> Result<Self> {
        let mut t = self.narrowed("select", dim, index, 1)?;
        let mut dims = t.shape.to_vec();
        dims.remove(dim);
        t.shape = Shape::new("select", dims, T::DTYPE)?;
        Ok(t)
    }

    fn narrowed(&self, op: &'static str, dim: usize, start: usize, len: usize) -> Result<Self> {
        self.dim_in_range(op, dim, self.rank())?;
        let size = self.shape[dim];
        if start.checked_add(len).is_none_or(|end| end > size) {
            let what = if op == "select" { format!("index {start}") } else { format!("{start}..{start}+{len}") };
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "{what} is out of range for dim {dim} (size {size}) of a tensor of shape {:?}",
                    self.shape
                ),
            });
        }
        let mut out_shape = self.shape.to_vec();
        out_shape[dim] = len;
        let out_len = shape::numel(op, &out_shape, T::DTYPE)?;
        if out_len == 0 {
            let out = self.assembled(op, out_shape, 0, &[])?;
            // Nothing was read: a gradient of zeros.
            return Ok(self.track1(out, op, |_| {
                let shape = self.shape.clone();
                move |g: Tensor<_, _>| Tensor::zeros_on(g.placement(), &*shape)
            }));
        }
        // The output is non-empty, so every factor of its size fits in usize, and so do
        // the input's (its element count fits).
        let (outer, inner) =
            (self.shape[..dim].iter().product::<usize>(), self.shape[dim + 1..].iter().product::<usize>());
        let part = Blocks {
            src: self.buffer(),
            src_offset: start * inner,
            src_stride: size * inner,
            dst_offset: 0,
            dst_stride: len * inner,
            count: outer,
            block: len * inner,
        };
        let out = self.assembled(op, out_shape, out_len, &[part])?;
        Ok(self.track1(out, op, |out| {
            // `select` drops the dim after this; its gradient comes in this shape again.
            let narrowed = out.shape().to_vec();
            move |g: Tensor<_, _>| g.reshape(&narrowed)?.padded(dim, start, size)
        }))
    }

    /// A new tensor of `shape` (`len` elements) on this tensor's device, written by `parts`,
    /// zeros where no part writes.
    pub(crate) fn assembled(
        &self,
        op: &'static str,
        shape: Vec<usize>,
        len: usize,
        parts: &[Blocks<'_, Buffer>],
    ) -> Result<Self> {
        let shape = Shape::new(op, shape, T::DTYPE)?;
        debug_assert_eq!(shape.numel(), len);
        let buf = self.queued(op)?.copy_blocks(T::DTYPE, len, parts)?;
        Ok(self.with_buffer(buf, shape))
    }

    fn dim_in_range(&self, op: &'static str, dim: usize, limit: usize) -> Result<()> {
        if dim >= limit {
            let allowed = if limit == 0 { "none".to_string() } else { format!("0..{limit}") };
            return Err(Error::InvalidArgument {
                op,
                reason: format!(
                    "dim {dim} is out of range (allowed: {allowed}) for a tensor of shape {:?}",
                    self.shape
                ),
            });
        }
        Ok(())
    }

    /// `self` followed by `rhs` along `dim`; the other dims must agree (the two-tensor
    /// form of [`Tensor::concat_dim`], with the placement checked at compile time).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let a = Tensor::<Cuda<0>>::zeros([2, 1])?;
    /// let b = Tensor::<Cuda<0>>::ones([2, 2])?;
    /// let c = a.cat_dim(&b, 1)?;
    /// assert_eq!(c.shape(), &[2, 3]);
    /// assert_eq!(c.to_vec()?, vec![0.0, 1.0, 1.0, 0.0, 1.0, 1.0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn cat_dim<E: Device>(&self, rhs: &Tensor<E, T>, dim: usize) -> Result<Self>
    where
        D: SamePlacement<E>,
    {
        let rhs = self.seen_here("cat", rhs)?;
        Self::concat_dim(&[self, &rhs], dim)
    }

    /// The tensors one after another along `dim` (PyTorch's `torch.cat(list, dim)`); all
    /// on one device, with equal ranks and equal sizes in every other dim.
    /// [`Tensor::concat`] is `concat_dim(parts, 0)`.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let a = Tensor::<Cpu, i32>::from_vec(vec![1, 2, 3, 4], [2, 2])?;
    /// let b = Tensor::<Cpu, i32>::from_vec(vec![5, 6], [2, 1])?;
    /// assert_eq!(Tensor::concat_dim(&[&a, &b], 1)?.to_vec()?, vec![1, 2, 5, 3, 4, 6]);
    /// assert!(Tensor::concat_dim(&[&a, &b], 0).is_err());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn concat_dim(parts: &[&Self], dim: usize) -> Result<Self> {
        let first = Self::first_of("cat", parts)?;
        first.dim_in_range("cat", dim, first.rank())?;
        let mut total = 0usize;
        for p in parts {
            first.same_device("cat", p)?;
            let same_rest = p.rank() == first.rank()
                && p.shape.iter().zip(first.shape.iter()).enumerate().all(|(d, (a, b))| d == dim || a == b);
            if !same_rest {
                return Err(Error::ShapeMismatch { op: "cat", lhs: first.shape.to_vec(), rhs: p.shape.to_vec() });
            }
            total = total.checked_add(p.shape[dim]).ok_or_else(|| too_big("cat", &first.shape))?;
        }
        let mut out_shape = first.shape.to_vec();
        out_shape[dim] = total;
        let sizes: Vec<usize> = parts.iter().map(|p| p.shape[dim]).collect();
        Self::joined("cat", parts, dim, &sizes, out_shape)
    }

    /// The tensors, of one shape, along a new dim `dim` (`0..=rank`) (PyTorch's
    /// `torch.stack`); all on one device.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let a = Tensor::<Cuda<0>>::from_vec(vec![1.0, 2.0], [2])?;
    /// let b = Tensor::<Cuda<0>>::from_vec(vec![3.0, 4.0], [2])?;
    /// assert_eq!(Tensor::stack(&[&a, &b], 0)?.to_vec()?, vec![1.0, 2.0, 3.0, 4.0]);
    /// let s = Tensor::stack(&[&a, &b], 1)?;
    /// assert_eq!(s.shape(), &[2, 2]);
    /// assert_eq!(s.to_vec()?, vec![1.0, 3.0, 2.0, 4.0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn stack(parts: &[&Self], dim: usize) -> Result<Self> {
        let first = Self::first_of("stack", parts)?;
        first.dim_in_range("stack", dim, first.rank() + 1)?;
        for p in parts {
            first.same_device("stack", p)?;
            if p.shape != first.shape {
                return Err(Error::ShapeMismatch { op: "stack", lhs: first.shape.to_vec(), rhs: p.shape.to_vec() });
            }
        }
        let mut out_shape = first.shape.to_vec();
        out_shape.insert(dim, parts.len());
        Self::joined("stack", parts, dim, &vec![1; parts.len()], out_shape)
    }

    fn first_of<'p>(op: &'static str, parts: &[&'p Self]) -> Result<&'p Self> {
        parts
            .first()
            .copied()
            .ok_or_else(|| Error::InvalidArgument { op, reason: "got an empty list of tensors".into() })
    }

    /// Writes `parts` one after another along `dim` of `out_shape`, part `j` taking
    /// `sizes[j]` places of that dim.
    fn joined(op: &'static str, parts: &[&Self], dim: usize, sizes: &[usize], out_shape: Vec<usize>) -> Result<Self> {
        let out = Self::joined_values(op, parts, dim, sizes, out_shape)?;
        // Each part's gradient is its slice of the output's, in its own shape.
        let pieces: Vec<(usize, usize, Shape)> = parts
            .iter()
            .zip(sizes)
            .scan(0, |at, (p, &n)| {
                let piece = (*at, n, p.shape.clone());
                *at += n;
                Some(piece)
            })
            .collect();
        Ok(Self::track_all(parts, out, op, |_| {
            move |g: Tensor<_, _>, needs: &[bool]| {
                pieces
                    .iter()
                    .zip(needs)
                    .map(|((at, n, shape), &need)| need.then(|| g.narrow(dim, *at, *n)?.reshape(&**shape)).transpose())
                    .collect()
            }
        }))
    }

    fn joined_values(
        op: &'static str,
        parts: &[&Self],
        dim: usize,
        sizes: &[usize],
        out_shape: Vec<usize>,
    ) -> Result<Self> {
        let first = parts[0];
        let out_len = shape::numel(op, &out_shape, T::DTYPE)?;
        if out_len == 0 {
            return first.assembled(op, out_shape, 0, &[]);
        }
        // A non-empty output: every factor of its size, and every part, fits in usize.
        let outer: usize = out_shape[..dim].iter().product();
        let inner: usize = out_shape[dim + 1..].iter().product();
        let row = out_shape[dim] * inner;
        let mut at = 0;
        let blocks: Vec<Blocks<'_, Buffer>> = parts
            .iter()
            .zip(sizes)
            .map(|(p, &size)| {
                let block = size * inner;
                let b = Blocks {
                    src: p.buffer(),
                    src_offset: 0,
                    src_stride: block,
                    dst_offset: at,
                    dst_stride: row,
                    count: outer,
                    block,
                };
                at += block;
                b
            })
            .collect();
        first.assembled(op, out_shape, out_len, &blocks)
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
            grad_fn: rhs.grad_fn.clone(),
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
        first.queued("cat")?;
        let bufs: Vec<_> = parts.iter().map(|p| (p.buffer(), p.numel())).collect();
        let buf = Buffer::concat(T::DTYPE, &bufs)?;
        let out = first.with_buffer(buf, out);
        Ok(Self::track_all(parts, out, "cat", |_| {
            let rows: Vec<usize> = parts.iter().map(|p| p.shape[0]).collect();
            {
                move |g: Tensor<_, _>, needs: &[bool]| {
                    let mut at = 0;
                    rows.iter()
                        .zip(needs)
                        .map(|(&n, &need)| {
                            let piece = need.then(|| g.narrow(0, at, n)).transpose();
                            at += n;
                            piece
                        })
                        .collect()
                }
            }
        }))
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
            let piece = self.with_buffer(buf, shape);
            out.push(self.track1(piece, "chunk", |_| move |g: Tensor<_, _>| g.padded(0, start, len)));
            start += rows;
        }
        Ok(out)
    }
}

fn too_big(op: &'static str, shape: &[usize]) -> Error {
    Error::InvalidArgument {
        op,
        reason: format!("the result of shape like {shape:?} has more elements than fit in memory"),
    }
}
