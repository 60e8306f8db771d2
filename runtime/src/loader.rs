//! `Loader`: PyTorch's `DataLoader(pin_memory=True)` with the copy to the GPU built in.
//! Background threads build batches in pinned memory; each batch is copied to the
//! target device on a side stream while the previous one is in use; batches come out in
//! order. A failing or panicking worker becomes an `Err` at that batch, never a hang, and
//! dropping the loader stops and joins its threads.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::backend::rand_bits;
use crate::copy::copy_pinned_async;
use crate::device::{Cpu, Device, Pinned, StaticDevice};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::shape;
use crate::stream::Stream;
use crate::tensor::Tensor;

/// An indexable source of samples, batched by the loader (PyTorch's map-style
/// `Dataset`). Each sample has the same shape; a batch stacks them along a new dim 0.
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

type Produced<T> = (usize, Result<Tensor<Pinned, T>>);
type BatchIter<T> = Box<dyn Iterator<Item = Result<Tensor<Cpu, T>>> + Send>;

enum Source<T: Element> {
    Batches(Mutex<(BatchIter<T>, usize)>),
    Dataset { make: Box<dyn Fn(usize) -> Result<Tensor<Pinned, T>> + Send + Sync>, batches: usize },
}

/// Configures a [`Loader`].
pub struct LoaderBuilder<T: Element> {
    source: Source<T>,
    prefetch: usize,
    workers: usize,
    progress: bool,
}

impl<T: Element> LoaderBuilder<T> {
    /// How many pinned batches may wait ahead of the consumer (default 2, at least 1).
    pub fn prefetch(mut self, batches: usize) -> Self {
        self.prefetch = batches.max(1);
        self
    }

    /// How many threads build and pin batches (default 2, at least 1).
    pub fn workers(mut self, threads: usize) -> Self {
        self.workers = threads.max(1);
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
        let total = match &self.source {
            Source::Dataset { batches, .. } => Some(*batches),
            Source::Batches(_) => None,
        };
        let (tx, rx) = sync_channel::<Produced<T>>(self.prefetch);
        let shared = Arc::new(Shared { source: self.source, next: AtomicUsize::new(0), stop: AtomicBool::new(false) });
        let mut workers = Vec::new();
        for i in 0..self.workers {
            let (mine, tx) = (Arc::clone(&shared), tx.clone());
            let spawned = std::thread::Builder::new().name(format!("locus-loader-{i}")).spawn(move || work(&mine, &tx));
            match spawned {
                Ok(h) => workers.push(h),
                Err(e) => {
                    shared.stop.store(true, Ordering::Relaxed);
                    drop(rx);
                    workers.into_iter().for_each(|h: JoinHandle<()>| drop(h.join()));
                    return Err(Error::LoaderWorker { batch: 0, message: format!("cannot start a worker: {e}") });
                }
            }
        }
        let bar = self.progress.then(|| match total {
            Some(n) => indicatif::ProgressBar::new(n as u64),
            None => indicatif::ProgressBar::new_spinner(),
        });
        Ok(Loader {
            device,
            stream,
            rx: Some(rx),
            shared,
            workers,
            waiting: BTreeMap::new(),
            ready: None,
            next: 0,
            done: false,
            bar,
        })
    }
}

struct Shared<T: Element> {
    source: Source<T>,
    next: AtomicUsize,
    stop: AtomicBool,
}

/// One worker: claims batch numbers in turn and sends each pinned batch (or its error).
fn work<T: Element>(shared: &Shared<T>, tx: &SyncSender<Produced<T>>) {
    while !shared.stop.load(Ordering::Relaxed) {
        let claimed = match &shared.source {
            Source::Dataset { make, batches } => {
                let i = shared.next.fetch_add(1, Ordering::Relaxed);
                if i >= *batches {
                    return;
                }
                (i, catch(i, || make(i)))
            }
            Source::Batches(iter) => {
                // The iterator hands out batches in order; the number goes with each.
                let mut guard = iter.lock().unwrap_or_else(|p| p.into_inner());
                let i = guard.1;
                let item = catch_unwind(AssertUnwindSafe(|| guard.0.next()));
                guard.1 += 1;
                drop(guard);
                match item {
                    Ok(None) => return,
                    Ok(Some(batch)) => (i, catch(i, || batch?.pin_memory())),
                    Err(p) => (i, Err(worker_error(i, panic_message(&p)))),
                }
            }
        };
        let failed = claimed.1.is_err();
        if tx.send(claimed).is_err() || failed {
            // The loader is gone, or this source is broken: nothing more to do.
            if failed {
                shared.stop.store(true, Ordering::Relaxed);
            }
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

/// Batches on device `D`, in order; see the module docs.
///
/// ```
/// use locus_runtime::{Cpu, Cuda, Loader, Tensor};
/// let data = Tensor::<Cpu>::arange(0.0, 10.0, 1.0)?.reshape([5, 2])?;
/// let loader = Loader::from_dataset(data, 2, None)?.to::<Cuda<0>>()?;
/// let sums: Vec<f32> = loader.map(|b| b?.sum()?.item()).collect::<Result<_, _>>()?;
/// assert_eq!(sums, vec![6.0, 22.0, 17.0]); // rows 0-1, 2-3, then 4
/// # Ok::<(), locus_runtime::Error>(())
/// ```
pub struct Loader<D: Device, T: Element> {
    device: D,
    stream: Stream<D>,
    rx: Option<Receiver<Produced<T>>>,
    shared: Arc<Shared<T>>,
    workers: Vec<JoinHandle<()>>,
    /// Pinned batches that arrived ahead of their turn.
    waiting: BTreeMap<usize, Result<Tensor<Pinned, T>>>,
    /// The next batch, already on its way to the device.
    ready: Option<Result<Tensor<D, T>>>,
    next: usize,
    done: bool,
    bar: Option<indicatif::ProgressBar>,
}

impl<T: Element> Loader<Cpu, T> {
    /// A loader over host batches from any iterator (each is pinned on a worker thread).
    ///
    /// ```
    /// use locus_runtime::{Cpu, Cuda, Loader, Tensor};
    /// let batches = (0..3).map(|i| Tensor::<Cpu, i32>::full([4], i));
    /// let loader = Loader::from_batches(batches).prefetch(2).to::<Cuda<0>>()?;
    /// let firsts: Vec<i32> = loader.map(|b| Ok(b?.to_vec()?[0])).collect::<locus_runtime::Result<_>>()?;
    /// assert_eq!(firsts, vec![0, 1, 2]);
    /// # Ok::<(), locus_runtime::Error>(())
    /// ```
    pub fn from_batches<I>(batches: I) -> LoaderBuilder<T>
    where
        I: IntoIterator<Item = Result<Tensor<Cpu, T>>>,
        I::IntoIter: Send + 'static,
    {
        let iter: BatchIter<T> = Box::new(batches.into_iter());
        LoaderBuilder { source: Source::Batches(Mutex::new((iter, 0))), prefetch: 2, workers: 1, progress: false }
    }

    /// A loader over `dataset` in batches of `batch_size` samples (the last one may be
    /// smaller), shuffled by a seeded permutation when `shuffle` is `Some(seed)`.
    pub fn from_dataset<S: Dataset<Elem = T>>(
        dataset: S,
        batch_size: usize,
        shuffle: Option<u64>,
    ) -> Result<LoaderBuilder<T>> {
        if batch_size == 0 {
            return Err(Error::InvalidArgument { op: "Loader", reason: "batch_size must be at least 1".into() });
        }
        let n = dataset.len();
        let order: Vec<usize> = match shuffle {
            Some(seed) => permutation(n, seed),
            None => (0..n).collect(),
        };
        let sample_shape = dataset.sample_shape();
        let sample = shape::numel("Loader", &sample_shape, T::DTYPE)?;
        let make = move |b: usize| -> Result<Tensor<Pinned, T>> {
            let idx = &order[b * batch_size..((b + 1) * batch_size).min(n)];
            let mut shape = vec![idx.len()];
            shape.extend_from_slice(&sample_shape);
            let mut batch = Tensor::<Pinned, T>::zeros(&shape)?;
            let out = batch.as_mut_slice()?;
            for (slot, &i) in out.chunks_mut(sample.max(1)).zip(idx) {
                dataset.get(i, &mut slot[..sample])?;
            }
            Ok(batch)
        };
        let batches = n.div_ceil(batch_size);
        Ok(LoaderBuilder {
            source: Source::Dataset { make: Box::new(make), batches },
            prefetch: 2,
            workers: 2,
            progress: false,
        })
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

impl<D: Device, T: Element> Loader<D, T> {
    /// The device batches are delivered on.
    pub fn device(&self) -> D {
        self.device
    }

    /// The pinned batch `i`, waiting for workers as needed; `None` at the end.
    fn pinned(&mut self, i: usize) -> Option<Result<Tensor<Pinned, T>>> {
        loop {
            if let Some(b) = self.waiting.remove(&i) {
                return Some(b);
            }
            let rx = self.rx.as_ref()?;
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok((j, b)) => {
                    self.waiting.insert(j, b);
                }
                // Workers still running: keep waiting (they never block forever on us).
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return self.waiting.remove(&i),
            }
        }
    }

    /// Batch `i` queued for the device, if it exists.
    fn start(&mut self, i: usize) -> Option<Result<Tensor<D, T>>> {
        let pinned = self.pinned(i)?;
        // The pinned block is held by the pool until the copy completes, so the pinned
        // tensor can go now; work on other streams waits for the copy automatically.
        Some(pinned.and_then(|p| copy_pinned_async(&p, self.device, &self.stream.raw).map(|(t, _)| t)))
    }

    fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        self.rx = None; // unblocks workers waiting to send
        for h in self.workers.drain(..) {
            let _ = h.join();
        }
        if let Some(bar) = &self.bar {
            bar.finish();
        }
    }
}

impl<D: Device, T: Element> Iterator for Loader<D, T> {
    type Item = Result<Tensor<D, T>>;

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

impl<D: Device, T: Element> Drop for Loader<D, T> {
    fn drop(&mut self) {
        self.shutdown();
    }
}
