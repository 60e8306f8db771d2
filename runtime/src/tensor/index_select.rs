//! `index_select`: the slices a list of indices picks along one dim (PyTorch's
//! `index_select`, and the embedding lookup when the dim is 0 of a `[vocab, hidden]`
//! table). The indices are read where they live, by the backend, which checks each.

use super::Tensor;
use crate::backend::{index_out_of_range, Gather};
use crate::device::Device;
use crate::element::{Element, IndexElement};
use crate::error::{Error, Result};
use crate::placement::SamePlacement;
use crate::shape::{self, Shape};

impl<D: Device, T: Element> Tensor<D, T> {
    /// The slices along `dim` that `index` picks, in its order (repeats allowed):
    /// the result has this tensor's shape with `dim` replaced by `index`'s length. `index`
    /// is 1-d and lives where this tensor does (checked at compile time for static
    /// placements, at run time for `Dyn`). An index outside `[0, size of dim)` is an
    /// `InvalidArgument` naming the first such index and the size, even when the result
    /// is empty; so is a `dim` out of range. The indices are `i32` or `i64` (see
    /// [`IndexElement`]: `i64` ones are read back once to check they fit an `i32`).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let table = Tensor::<Cpu>::from_vec(vec![0.0, 0.5, 1.0, 1.5, 2.0, 2.5], [3, 2])?;
    /// let ids = Tensor::<Cpu, i32>::from_vec(vec![2, 0, 2], [3])?;
    /// let rows = table.index_select(0, &ids)?;
    /// assert_eq!(rows.shape(), &[3, 2]);
    /// assert_eq!(rows.to_vec()?, vec![2.0, 2.5, 0.0, 0.5, 2.0, 2.5]);
    /// let cols = table.index_select(1, &Tensor::<Cpu, i32>::from_vec(vec![1], [1])?)?;
    /// assert_eq!(cols.to_vec()?, vec![0.5, 1.5, 2.5]);
    /// let e = table.index_select(0, &Tensor::<Cpu, i32>::from_vec(vec![3], [1])?).unwrap_err();
    /// assert!(e.to_string().contains("index 3 (at position 0) is out of range for dim 0 of size 3"));
    /// # Ok::<(), locus::Error>(())
    /// ```
    ///
    /// An index on another placement does not compile:
    ///
    /// ```text
    /// use locus::{Cuda, Tensor};
    /// let table = Tensor::<Cuda<0>>::ones([4, 2])?;
    /// let ids = Tensor::<Cuda<1>, i32>::zeros([3])?;
    /// let _ = table.index_select(0, &ids)?; // tensors on `Cuda<0>` and `Cuda<1>` cannot be used in one op
    /// ```
    pub fn index_select<E: Device, I: IndexElement>(&self, dim: usize, index: &Tensor<E, I>) -> Result<Self>
    where
        D: SamePlacement<E>,
    {
        const OP: &str = "index_select";
        self.same_device_as(OP, index.device())?;
        let Some(&size) = self.shape.get(dim) else {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: format!("dim {dim} is out of range for a tensor of shape {:?}", self.shape()),
            });
        };
        let index = index.as_i32_indices(OP, size, |at, v| index_out_of_range(dim, size, at, v))?;
        self.index_select_i32(dim, &index)
    }

    /// [`Tensor::index_select`] with `i32` indices on the same device, `dim` checked.
    fn index_select_i32<E: Device>(&self, dim: usize, index: &Tensor<E, i32>) -> Result<Self> {
        const OP: &str = "index_select";
        if index.rank() != 1 {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: format!("needs a 1-d index, got shape {:?}", index.shape()),
            });
        }
        let count = index.shape[0];
        if self.shape[dim] == 0 && count > 0 {
            // No index is in range of an empty dim: the error now, before the result is
            // allocated. Its other dims may be huge (this tensor is empty whatever they are).
            let first = index.narrow(0, 0, 1)?.item()?;
            return Err(index_out_of_range(dim, 0, 0, first.into()));
        }
        let mut dims = self.shape.to_vec();
        dims[dim] = count;
        let out = Shape::result(OP, dims, T::DTYPE, &[&self.shape, &index.shape])?;
        let gather = Gather {
            dim,
            outer: shape::product(OP, &self.shape[..dim])?,
            size: self.shape[dim],
            inner: shape::product(OP, &self.shape[dim + 1..])?,
            count,
        };
        let buf = self.queued("index_select")?.index_select(index.buffer(), T::DTYPE, gather)?;
        let out = self.with_buffer(buf, out);
        Ok(self.track1(out, OP, |_| {
            let (shape, idx) = (self.shape.clone(), index.saved());
            // dx[.., s, ..] = Σ_{c : idx[c] = s} g[.., c, ..], in the order of c: one launch,
            // and no `[size, count]` one-hot (a vocabulary by a batch of tokens).
            move |g: Tensor<_, _>| {
                let buf = g.queued(OP)?.index_add(idx.buffer(), T::DTYPE, gather)?;
                Ok(g.with_buffer(buf, shape.clone()))
            }
        }))
    }
}

impl<D: Device, I: IndexElement> Tensor<D, I> {
    /// These indices as the `i32` the backends read. `i32` ones come back as they are (the
    /// backends check them where they read them); `i64` ones are converted once their
    /// smallest and largest are read back and found to fit an `i32`. When one does not, the
    /// first index outside `[0, bound)`, in list order as the backends report one, goes to
    /// `bad` (its position and value); an index that is in range but past `i32::MAX` (a dim
    /// longer than `i32::MAX`) is an `Err` of `op`. So a wrapped index is never read.
    pub(crate) fn as_i32_indices(
        &self,
        op: &'static str,
        bound: usize,
        bad: impl Fn(usize, i64) -> Error,
    ) -> Result<Tensor<D, i32>> {
        let wide = match self.clone().retyped::<i32>() {
            Ok(narrow) => return Ok(narrow),
            Err(other) => other,
        };
        if wide.numel() > 0 {
            let (lo, hi) = (wide.min()?.item()?.to_i64(), wide.max()?.item()?.to_i64());
            if lo < i32::MIN.into() || hi > i32::MAX.into() {
                let values: Vec<i64> = wide.to_vec()?.into_iter().map(IndexElement::to_i64).collect();
                let outside = |v: i64| v < 0 || v as u64 >= bound as u64;
                if let Some((at, &v)) = values.iter().enumerate().find(|&(_, &v)| outside(v)) {
                    return Err(bad(at, v));
                }
                let (at, v) =
                    values.iter().enumerate().find(|&(_, &v)| v > i32::MAX.into()).map_or((0, hi), |(a, &v)| (a, v));
                return Err(Error::InvalidArgument {
                    op,
                    reason: format!(
                        "index {v} (at position {at}) is past i32::MAX, the largest index the backends read; \
                         dims longer than that cannot be indexed"
                    ),
                });
            }
        }
        wide.to_dtype::<i32>()
    }
}
