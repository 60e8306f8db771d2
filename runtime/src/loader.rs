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

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

use crate::device::{Cpu, Device, StaticDevice};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::shape;
use crate::stream::Stream;
use crate::tensor::Tensor;

mod dataset;

pub use dataset::{Batch, Dataset};

/// Pins one batch from an iterator; run on a worker, outside the iterator's lock.
type PinJob<T> = Box<dyn FnOnce() -> Result<<T as Batch>::Pinned> + Send>;
type BatchIter<T> = Box<dyn Iterator<Item = PinJob<T>> + Send>;
/// Builds the pinned batch of the given samples.
type Gather<T> = Box<dyn Fn(&[usize]) -> Result<<T as Batch>::Pinned> + Send + Sync>;

/// Where a builder's batches come from.
enum Origin<T: Batch> {
    Batches(BatchIter<T>),
    Dataset { gather: Gather<T>, len: usize, batch_size: usize, shuffle: Option<u64> },
}

/// Where a running loader's batches come from.
enum Source<T: Batch> {
    /// The iterator and the number of the batch it hands out next.
    Batches(Mutex<(BatchIter<T>, usize)>),
    /// The samples of this epoch in order, `batch_size` to a batch.
    Dataset { gather: Gather<T>, order: Vec<usize>, batch_size: usize },
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
    fn new(origin: Origin<T>, workers: usize) -> Self {
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
        self.to_device(D::default())
    }

    /// Starts the loader, delivering batches on the CUDA device `device`.
    pub fn to_device<D: Device>(self, device: D) -> Result<Loader<D, T>> {
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

/// What the workers and the consumer share.
struct Shared<T: Batch> {
    source: Source<T>,
    /// How many batches may be claimed and not yet taken: `prefetch` plus one per worker.
    window: usize,
    state: Mutex<State<T>>,
    /// Signalled when the consumer takes a batch or the loader stops; workers wait on it.
    room: Condvar,
    /// Signalled when a batch is built or a worker exits; the consumer waits on it.
    arrived: Condvar,
}

struct State<T: Batch> {
    /// The next batch of a dataset to claim.
    next_claim: usize,
    /// Batches the consumer has taken off pinned memory (every batch below this one).
    taken: usize,
    /// Built batches (or their errors) not taken yet.
    built: BTreeMap<usize, Result<T::Pinned>>,
    /// Workers that have not exited.
    running: usize,
    stop: bool,
}

impl<T: Batch> Shared<T> {
    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until batch `i` is inside the window; false once the loader stops.
    fn wait_for_room(&self, i: usize) -> bool {
        let mut st = self.lock();
        while !st.stop && i >= st.taken + self.window {
            st = self.room.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        !st.stop
    }

    /// Claims the next of `batches` dataset batches once it is inside the window; `None`
    /// when none is left or the loader stops.
    fn claim(&self, batches: usize) -> Option<usize> {
        let mut st = self.lock();
        while !st.stop && st.next_claim < batches && st.next_claim >= st.taken + self.window {
            st = self.room.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        if st.stop || st.next_claim >= batches {
            return None;
        }
        st.next_claim += 1;
        Some(st.next_claim - 1)
    }

    /// Hands batch `i` (or its error) to the consumer; an error stops the other workers.
    fn deliver(&self, i: usize, batch: Result<T::Pinned>) {
        let mut st = self.lock();
        if batch.is_err() {
            // Batches before `i` were claimed before it and are still delivered.
            st.stop = true;
            self.room.notify_all();
        }
        st.built.insert(i, batch);
        self.arrived.notify_all();
    }

    /// Batch `i`, waiting for workers as needed; `None` when no worker is left to build it.
    fn take(&self, i: usize) -> Option<Result<T::Pinned>> {
        let mut st = self.lock();
        loop {
            if let Some(b) = st.built.remove(&i) {
                return Some(b);
            }
            if st.running == 0 {
                return None;
            }
            st = self.arrived.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// Every batch below `taken` is off pinned memory: the window moves on.
    fn taken(&self, taken: usize) {
        self.lock().taken = taken;
        self.room.notify_all();
    }

    fn exited(&self) {
        self.lock().running -= 1;
        self.arrived.notify_all();
    }

    /// Stops the workers at their next claim and drops the batches nobody will take.
    fn stop(&self) {
        let mut st = self.lock();
        st.stop = true;
        st.built.clear();
        self.room.notify_all();
    }
}

/// One worker: claims batch numbers in turn, inside the window, and delivers each pinned
/// batch (or its error).
fn work<T: Batch>(shared: &Shared<T>) {
    loop {
        let (i, batch) = match &shared.source {
            Source::Dataset { gather, order, batch_size } => {
                let Some(i) = shared.claim(order.len().div_ceil(*batch_size)) else { return };
                let samples = &order[i * batch_size..((i + 1) * batch_size).min(order.len())];
                (i, catch(i, || gather(samples)))
            }
            Source::Batches(iter) => {
                // The iterator hands out batches in order; the number goes with each.
                let mut guard = iter.lock().unwrap_or_else(|p| p.into_inner());
                let i = guard.1;
                if !shared.wait_for_room(i) {
                    return;
                }
                let item = catch_unwind(AssertUnwindSafe(|| guard.0.next()));
                guard.1 += 1;
                if !matches!(item, Ok(Some(_))) {
                    // Ended or panicked: later workers must not call `next` again.
                    guard.0 = Box::new(std::iter::empty());
                }
                drop(guard);
                match item {
                    Ok(None) => return,
                    Ok(Some(pin)) => (i, catch(i, pin)),
                    Err(p) => (i, Err(worker_error(i, panic_message(&p)))),
                }
            }
        };
        let failed = batch.is_err();
        shared.deliver(i, batch);
        if failed {
            return;
        }
    }
}

fn catch<T>(batch: usize, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(Error::LoaderWorker { batch, message })) => Err(Error::LoaderWorker { batch, message }),
        Ok(Err(e)) => Err(worker_error(batch, e.to_string())),
        Err(p) => Err(worker_error(batch, panic_message(&p))),
    }
}

fn worker_error(batch: usize, message: String) -> Error {
    Error::LoaderWorker { batch, message }
}

fn panic_message(p: &Box<dyn std::any::Any + Send>) -> String {
    format!("worker panicked: {}", crate::error::panic_message(&**p))
}

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
