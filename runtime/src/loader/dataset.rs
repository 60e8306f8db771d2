//! What a loader reads and what it hands out: the `Dataset` trait (samples by index),
//! the `Batch` kinds (one tensor, or an input and its target), and the sample orders.

use std::sync::Arc;

use crate::backend::rand_bits;
use crate::copy::copy_pinned_async;
use crate::device::{Cpu, Device, Pinned};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::stream::Stream;
use crate::tensor::Tensor;

/// An indexable source of samples, batched by the loader (PyTorch's map-style
/// `Dataset`). Each sample has the same shape; a batch stacks them along a new dim 0.
///
/// A host tensor is a dataset of its rows; an `Arc` of a dataset is the same dataset,
/// shared, so a loader per epoch reads it without copying it.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Cpu, Dataset, Tensor};
/// let data = Tensor::<Cpu, i32>::arange(0, 6, 1)?.reshape([3, 2])?;
/// let mut row = [0; 2];
/// data.get(1, &mut row)?;
/// assert_eq!((data.len(), data.sample_shape(), row), (3, vec![2], [2, 3]));
/// # Ok::<(), locus::Error>(())
/// ```
pub trait Dataset: Send + Sync + 'static {
    /// The element type of the samples.
    type Elem: Element;
    /// The number of samples.
    fn len(&self) -> usize;
    /// Whether there are no samples.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The shape of one sample.
    fn sample_shape(&self) -> Vec<usize>;
    /// Writes sample `index` into `out` (its length is the sample's element count).
    fn get(&self, index: usize, out: &mut [Self::Elem]) -> Result<()>;
}

/// A host tensor is a dataset of its rows (dim 0).
impl<T: Element> Dataset for Tensor<Cpu, T> {
    type Elem = T;
    fn len(&self) -> usize {
        self.shape().first().copied().unwrap_or(0)
    }
    fn sample_shape(&self) -> Vec<usize> {
        self.shape().get(1..).map(<[usize]>::to_vec).unwrap_or_default()
    }
    fn get(&self, index: usize, out: &mut [T]) -> Result<()> {
        let n = out.len();
        let row = self.as_slice().get(index * n..(index + 1) * n).ok_or_else(|| Error::InvalidArgument {
            op: "Dataset::get",
            reason: format!("sample {index} is out of range"),
        })?;
        out.copy_from_slice(row);
        Ok(())
    }
}

/// A shared dataset (`Arc<S>` or `Arc<dyn Dataset<Elem = T>>`): each loader holds one
/// more reference, never a copy of the samples.
impl<S: Dataset + ?Sized> Dataset for Arc<S> {
    type Elem = S::Elem;
    fn len(&self) -> usize {
        (**self).len()
    }
    fn sample_shape(&self) -> Vec<usize> {
        (**self).sample_shape()
    }
    fn get(&self, index: usize, out: &mut [S::Elem]) -> Result<()> {
        (**self).get(index, out)
    }
}

mod sealed {
    pub trait Sealed {}
    impl<T: crate::element::Element> Sealed for T {}
    impl<A: crate::element::Element, B: crate::element::Element> Sealed for (A, B) {}
}

/// What a loader's batches are made of, named by element types: `T` is one tensor
/// (`Loader<D, f32>` yields `Tensor<D, f32>`), `(A, B)` an input and its target
/// (`Loader<D, (f32, i32)>` yields `(Tensor<D, f32>, Tensor<D, i32>)`). Each part is
/// pinned and copied to the device on its own. Sealed: these two are all there are.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Cpu, Cuda, Loader, Tensor};
/// let (x, y) = (Tensor::<Cpu>::ones([4, 3])?, Tensor::<Cpu, i32>::arange(0, 4, 1)?);
/// let loader: Loader<Cuda<0>, (f32, i32)> = Loader::from_pairs(x, y, 4, None)?.to()?;
/// # Ok::<(), locus::Error>(())
/// ```
pub trait Batch: sealed::Sealed + Send + Sync + 'static {
    /// The batch on device `D`.
    type On<D: Device>;
    /// The batch in pinned host memory, between its worker and the copy.
    #[doc(hidden)]
    type Pinned: Send + 'static;
    /// Queues the copy of a pinned batch to `device` on `stream`.
    #[doc(hidden)]
    fn copy_to<D: Device>(pinned: &Self::Pinned, device: D, stream: &Stream<D>) -> Result<Self::On<D>>;
}

impl<T: Element> Batch for T {
    type On<D: Device> = Tensor<D, T>;
    type Pinned = Tensor<Pinned, T>;
    fn copy_to<D: Device>(pinned: &Self::Pinned, device: D, stream: &Stream<D>) -> Result<Tensor<D, T>> {
        // The pinned block is held by the pool until the copy completes, so the pinned
        // tensor can go now; work on other streams waits for the copy automatically.
        copy_pinned_async(pinned, device, &stream.raw).map(|(t, _)| t)
    }
}

impl<A: Element, B: Element> Batch for (A, B) {
    type On<D: Device> = (Tensor<D, A>, Tensor<D, B>);
    type Pinned = (Tensor<Pinned, A>, Tensor<Pinned, B>);
    fn copy_to<D: Device>(pinned: &Self::Pinned, device: D, stream: &Stream<D>) -> Result<Self::On<D>> {
        Ok((A::copy_to(&pinned.0, device, stream)?, B::copy_to(&pinned.1, device, stream)?))
    }
}

/// Samples `indices` of `dataset` (each of shape `sample_shape`), stacked in a pinned
/// batch.
pub(super) fn gather<S: Dataset>(
    dataset: &S,
    sample_shape: &[usize],
    indices: &[usize],
) -> Result<Tensor<Pinned, S::Elem>> {
    let sample = crate::shape::numel("Loader", sample_shape, S::Elem::DTYPE)?;
    let mut shape = vec![indices.len()];
    shape.extend_from_slice(sample_shape);
    let mut batch = Tensor::<Pinned, S::Elem>::zeros(&shape)?;
    let out = batch.as_mut_slice()?;
    for (slot, &i) in out.chunks_mut(sample.max(1)).zip(indices) {
        dataset.get(i, &mut slot[..sample])?;
    }
    Ok(batch)
}

/// The order in which an epoch visits `n` samples: 0..n, or with `shuffle: Some(seed)`
/// a seeded permutation that differs from epoch to epoch. Epoch 0 uses `seed` itself.
pub(super) fn sample_order(n: usize, shuffle: Option<u64>, epoch: u64) -> Vec<usize> {
    match shuffle {
        None => (0..n).collect(),
        Some(seed) if epoch == 0 => permutation(n, seed),
        // Hashed, not `seed ^ epoch`, so that (seed, epoch) pairs do not collide.
        Some(seed) => permutation(n, rand_bits(seed, u64::MAX - epoch)),
    }
}

/// A seeded Fisher-Yates permutation of 0..n.
fn permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = (rand_bits(seed, i as u64) % (i as u64 + 1)) as usize;
        v.swap(i, j);
    }
    v
}
