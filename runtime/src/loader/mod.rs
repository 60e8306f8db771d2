//! `Loader`: PyTorch's `DataLoader(pin_memory=True)` with the copy to the GPU built in.
//! Background threads build batches in pinned memory; each batch is copied to the
//! target device on a side stream while the previous one is in use; batches come out in
//! order. A failing or panicking worker becomes an `Err` at that batch, never a hang, and
//! dropping the loader stops and joins its threads.
//!
//! A batch is one tensor (`Loader<D, f32>`) or an (input, target) pair of tensors
//! (`Loader<D, (f32, i32)>`, from [`Loader::from_pairs`]); each part is pinned and
//! copied on its own. A loader runs one epoch: the next epoch is a new loader over the
//! same `Arc` of the dataset, with [`LoaderBuilder::epoch`] for a fresh shuffle.
//!
//! Memory is bounded by a window over the batch numbers: a worker claims batch `i` only
//! while `i < taken + prefetch + workers`, where `taken` counts the batches the consumer
//! has moved off pinned memory. So however long one batch takes, the others can fill
//! the window and no more: at most `prefetch + workers` batches are pinned at once.

use std::sync::Arc;
use std::thread::JoinHandle;

use crate::device::{Cpu, Device};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::shape;
use crate::stream::Stream;
use crate::tensor::Tensor;

mod builder;
mod dataset;
mod window;
mod worker;

use builder::{Gather, Origin, PinJob};
use window::Shared;

pub use builder::LoaderBuilder;
pub use dataset::{Batch, Dataset};

/// Batches on device `D`, in order: `Tensor<D, T>` for an element type `T`, or a pair
/// of tensors for `T = (A, B)` (see [`Batch`]). PyTorch's `DataLoader(pin_memory=True)`
/// with the copy to the GPU built in.
///
/// Background threads build batches in pinned memory; each batch is copied to the
/// target device on a side stream while the previous one is in use, and batches come
/// out in order. A failing or panicking worker becomes an `Err` at that batch, never a
/// hang, and dropping the loader stops and joins its threads.
///
/// A loader runs one epoch: the next epoch is a new loader over the same `Arc` of the
/// dataset, with [`LoaderBuilder::epoch`] for a fresh shuffle. At most
/// `prefetch + workers` batches are pinned at once (see [`LoaderBuilder::prefetch`]):
/// a worker claims a batch only while it is fewer than that many ahead of the batches
/// the consumer has taken, however long any one batch takes.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Cpu, Cuda, Loader, Tensor};
/// let data = Tensor::<Cpu>::arange(0.0, 10.0, 1.0)?.reshape([5, 2])?;
/// let loader = Loader::from_dataset(data, 2, None)?.to::<Cuda<0>>()?;
/// let sums: Vec<f32> = loader.map(|b| b?.sum()?.item()).collect::<Result<_, _>>()?;
/// assert_eq!(sums, vec![6.0, 22.0, 17.0]); // rows 0-1, 2-3, then 4
/// # Ok::<(), locus::Error>(())
/// ```
pub struct Loader<D: Device, T: Batch> {
    device: D,
    stream: Stream<D>,
    shared: Arc<Shared<T>>,
    workers: Vec<JoinHandle<()>>,
    /// The next batch, already on its way to the device.
    ready: Option<Result<T::On<D>>>,
    next: usize,
    done: bool,
    bar: Option<indicatif::ProgressBar>,
}

impl<T: Element> Loader<Cpu, T> {
    /// A loader over host batches from any iterator (each is pinned on a worker thread).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Cuda, Loader, Tensor};
    /// let batches = (0..3).map(|i| Tensor::<Cpu, i32>::full([4], i));
    /// let loader = Loader::from_batches(batches).prefetch(2).to::<Cuda<0>>()?;
    /// let firsts: Vec<i32> = loader.map(|b| Ok(b?.to_vec()?[0])).collect::<locus::Result<_>>()?;
    /// assert_eq!(firsts, vec![0, 1, 2]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn from_batches<I>(batches: I) -> LoaderBuilder<T>
    where
        I: IntoIterator<Item = Result<Tensor<Cpu, T>>>,
        I::IntoIter: Send + 'static,
    {
        let jobs = batches.into_iter().map(|b| -> PinJob<T> { Box::new(move || b?.pin_memory()) });
        LoaderBuilder::new(Origin::Batches(Box::new(jobs)), 1)
    }

    /// A loader over `dataset` in batches of `batch_size` samples (the last one may be
    /// smaller), shuffled by a seeded permutation when `shuffle` is `Some(seed)`. Pass an
    /// `Arc` of the dataset to share it between the loaders of several epochs.
    pub fn from_dataset<S: Dataset<Elem = T>>(
        dataset: S,
        batch_size: usize,
        shuffle: Option<u64>,
    ) -> Result<LoaderBuilder<T>> {
        check_batch_size(batch_size)?;
        let len = dataset.len();
        let shape = dataset.sample_shape();
        shape::numel("Loader", &shape, T::DTYPE)?;
        let gather: Gather<T> = Box::new(move |samples| dataset::gather(&dataset, &shape, samples));
        Ok(LoaderBuilder::new(Origin::Dataset { gather, len, batch_size, shuffle }, 2))
    }
}

impl<A: Element, B: Element> Loader<Cpu, (A, B)> {
    /// A loader over (input, target) pairs: sample `i` of `inputs` goes with sample `i`
    /// of `targets`. Both are batched in lockstep, as [`Loader::from_dataset`] batches
    /// one, and each batch is a pair of tensors, each pinned and copied to the device.
    /// The two must have as many samples.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Cuda, Loader, Tensor};
    /// let x = Tensor::<Cpu>::arange(0.0, 6.0, 1.0)?.reshape([3, 2])?;
    /// let y = Tensor::<Cpu, i32>::from_vec(vec![7, 8, 9], [3])?;
    /// let mut loader = Loader::from_pairs(x, y, 2, None)?.to::<Cuda<0>>()?;
    /// let (input, target) = loader.next().unwrap()?;
    /// assert_eq!((input.to_vec()?, target.to_vec()?), (vec![0.0, 1.0, 2.0, 3.0], vec![7, 8]));
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn from_pairs<X, Y>(
        inputs: X,
        targets: Y,
        batch_size: usize,
        shuffle: Option<u64>,
    ) -> Result<LoaderBuilder<(A, B)>>
    where
        X: Dataset<Elem = A>,
        Y: Dataset<Elem = B>,
    {
        check_batch_size(batch_size)?;
        let len = inputs.len();
        if targets.len() != len {
            return Err(Error::InvalidArgument {
                op: "Loader::from_pairs",
                reason: format!(
                    "the inputs have {len} samples but the targets have {}; each input needs one target",
                    targets.len()
                ),
            });
        }
        let (x_shape, y_shape) = (inputs.sample_shape(), targets.sample_shape());
        shape::numel("Loader", &x_shape, A::DTYPE)?;
        shape::numel("Loader", &y_shape, B::DTYPE)?;
        let gather: Gather<(A, B)> = Box::new(move |samples| {
            Ok((dataset::gather(&inputs, &x_shape, samples)?, dataset::gather(&targets, &y_shape, samples)?))
        });
        Ok(LoaderBuilder::new(Origin::Dataset { gather, len, batch_size, shuffle }, 2))
    }
}

fn check_batch_size(batch_size: usize) -> Result<()> {
    if batch_size == 0 {
        return Err(Error::InvalidArgument { op: "Loader", reason: "batch_size must be at least 1".into() });
    }
    Ok(())
}

impl<D: Device, T: Batch> Loader<D, T> {
    /// The device batches are delivered on.
    pub fn device(&self) -> D {
        self.device
    }

    /// Batch `i` queued for the device, if it exists.
    fn start(&mut self, i: usize) -> Option<Result<T::On<D>>> {
        let pinned = self.shared.take(i)?;
        let _copy = crate::trace::Range::named_by(|| format!("queue copy of batch {i}"));
        let queued = pinned.and_then(|p| T::copy_to(&p, self.device, &self.stream));
        // Only now is batch `i` off pinned memory, so only now may another be claimed.
        self.shared.taken(i + 1);
        Some(queued)
    }

    fn shutdown(&mut self) {
        // A worker waiting for room wakes and exits; one building a batch exits after it.
        self.shared.stop();
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
        // Batches delivered after the stop.
        self.shared.lock().built.clear();
        if let Some(bar) = &self.bar {
            bar.finish();
        }
    }
}

impl<D: Device, T: Batch> Iterator for Loader<D, T> {
    type Item = Result<T::On<D>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        if let Err(e) = crate::backend::dispatch::capture::refuse("Loader", builder::LOADER_IN_CAPTURE) {
            return Some(Err(e));
        }
        let current = match self.ready.take() {
            Some(b) => Some(b),
            None => self.start(self.next),
        };
        let Some(current) = current else {
            self.done = true;
            self.shutdown();
            return None;
        };
        self.next += 1;
        if current.is_err() {
            self.done = true;
            self.shutdown();
            return Some(current);
        }
        // Queue the next batch's copy now, so it overlaps the caller's work on this one.
        self.ready = self.start(self.next);
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
        Some(current)
    }
}

impl<D: Device, T: Batch> Drop for Loader<D, T> {
    fn drop(&mut self) {
        self.shutdown();
    }
}
