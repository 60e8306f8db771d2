//! [`LoaderBuilder`]: where a loader's batches come from (an iterator of host batches,
//! or a dataset with its batch size and shuffle), its prefetch, workers and epoch, and
//! the start that turns all of it into a running [`Loader`]: the side stream, the
//! window the workers share with the consumer, and the worker threads.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

use super::window::{Shared, Source, State};
use super::worker::work;
use super::{dataset, Batch, Loader};
use crate::device::{Device, StaticDevice};
use crate::error::{Error, Result};
use crate::stream::Stream;

/// Pins one batch from an iterator; run on a worker, outside the iterator's lock.
pub(super) type PinJob<T> = Box<dyn FnOnce() -> Result<<T as Batch>::Pinned> + Send>;
pub(super) type BatchIter<T> = Box<dyn Iterator<Item = PinJob<T>> + Send>;
/// Builds the pinned batch of the given samples.
pub(super) type Gather<T> = Box<dyn Fn(&[usize]) -> Result<<T as Batch>::Pinned> + Send + Sync>;

/// Where a builder's batches come from.
pub(super) enum Origin<T: Batch> {
    Batches(BatchIter<T>),
    Dataset { gather: Gather<T>, len: usize, batch_size: usize, shuffle: Option<u64> },
}

/// Configures a [`Loader`].
pub struct LoaderBuilder<T: Batch> {
    origin: Origin<T>,
    epoch: u64,
    prefetch: usize,
    workers: usize,
    progress: bool,
}

impl<T: Batch> LoaderBuilder<T> {
    pub(super) fn new(origin: Origin<T>, workers: usize) -> Self {
        LoaderBuilder { origin, epoch: 0, prefetch: 2, workers, progress: false }
    }

    /// How many pinned batches may wait ahead of the consumer (default 2, at least 1).
    /// With one more per worker being built, at most `prefetch + workers` batches are
    /// pinned at any time.
    pub fn prefetch(mut self, batches: usize) -> Self {
        self.prefetch = batches.max(1);
        self
    }

    /// How many threads build and pin batches (default 2, at least 1).
    pub fn workers(mut self, threads: usize) -> Self {
        self.workers = threads.max(1);
        self
    }

    /// Which epoch this is (default 0): a shuffled dataset is visited in a new order
    /// each epoch, derived from its seed, and the same order for the same seed and
    /// epoch. Leaves unshuffled datasets and iterators as they are.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use std::sync::Arc;
    /// use locus::{Cpu, Cuda, Loader, Tensor};
    /// let data = Arc::new(Tensor::<Cpu>::arange(0.0, 64.0, 1.0)?.reshape([64, 1])?);
    /// for epoch in 0..2 {
    ///     // Each loader shares `data` through the Arc, no copy.
    ///     let loader = Loader::from_dataset(Arc::clone(&data), 16, Some(7))?.epoch(epoch).to::<Cuda<0>>()?;
    ///     assert_eq!(loader.count(), 4);
    /// }
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn epoch(mut self, epoch: u64) -> Self {
        self.epoch = epoch;
        self
    }

    /// Shows an indicatif progress bar over the batches.
    pub fn progress(mut self, on: bool) -> Self {
        self.progress = on;
        self
    }

    /// Starts the loader, delivering batches on the CUDA device `D`.
    pub fn to<D: StaticDevice>(self) -> Result<Loader<D, T>> {
        self.to_device(D::resolve()?)
    }

    /// Starts the loader, delivering batches on the CUDA device `device`.
    pub fn to_device<D: Device>(self, device: D) -> Result<Loader<D, T>> {
        crate::backend::dispatch::capture::refuse("Loader", LOADER_IN_CAPTURE)?;
        if device.id().ordinal().is_none() {
            return Err(Error::InvalidArgument {
                op: "Loader",
                reason: format!("a loader delivers to a CUDA device, not {}", device.id()),
            });
        }
        let stream = Stream::new_on(device)?;
        let (source, total) = match self.origin {
            Origin::Batches(iter) => (Source::Batches(Mutex::new((iter, 0))), None),
            Origin::Dataset { gather, len, batch_size, shuffle } => {
                let order = dataset::sample_order(len, shuffle, self.epoch);
                (Source::Dataset { gather, order, batch_size }, Some(len.div_ceil(batch_size)))
            }
        };
        let shared = Arc::new(Shared {
            source,
            window: self.prefetch + self.workers,
            state: Mutex::new(State {
                next_claim: 0,
                taken: 0,
                built: BTreeMap::new(),
                running: self.workers,
                stop: false,
            }),
            room: Condvar::new(),
            arrived: Condvar::new(),
        });
        let mut workers = Vec::new();
        for i in 0..self.workers {
            let mine = Arc::clone(&shared);
            let spawned = std::thread::Builder::new().name(format!("locus-loader-{i}")).spawn(move || {
                // `work` catches the user's panics; this catches any other, so that the
                // consumer always learns that the worker is gone.
                let _ = catch_unwind(AssertUnwindSafe(|| work(&mine)));
                mine.exited();
            });
            match spawned {
                Ok(h) => workers.push(h),
                Err(e) => {
                    shared.stop();
                    workers.into_iter().for_each(|h: JoinHandle<()>| drop(h.join()));
                    return Err(Error::LoaderWorker { batch: 0, message: format!("cannot start a worker: {e}") });
                }
            }
        }
        let bar = self.progress.then(|| match total {
            Some(n) => indicatif::ProgressBar::new(n as u64),
            None => indicatif::ProgressBar::new_spinner(),
        });
        Ok(Loader { device, stream, shared, workers, ready: None, next: 0, done: false, bar })
    }
}

/// Why a loader cannot be used while a graph is captured.
pub(super) const LOADER_IN_CAPTURE: &str = "its batches are copied from host memory on threads of its own, which a \
     replay would not repeat; take the batch before the capture's replay and copy it into an input with \
     `Graph::inputs_mut`";
