//! The window the workers and the consumer share: which batch a worker may claim next,
//! the built batches waiting to be taken, and the stop flag. A worker claims batch `i`
//! only while `i < taken + window`, where `taken` counts the batches the consumer has
//! moved off pinned memory, so at most `window` batches are pinned at once.

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard};

use super::builder::{BatchIter, Gather};
use super::Batch;
use crate::error::Result;

/// Where a running loader's batches come from.
pub(super) enum Source<T: Batch> {
    /// The iterator and the number of the batch it hands out next.
    Batches(Mutex<(BatchIter<T>, usize)>),
    /// The samples of this epoch in order, `batch_size` to a batch.
    Dataset { gather: Gather<T>, order: Vec<usize>, batch_size: usize },
}

/// What the workers and the consumer share.
pub(super) struct Shared<T: Batch> {
    pub(super) source: Source<T>,
    /// How many batches may be claimed and not yet taken: `prefetch` plus one per worker.
    pub(super) window: usize,
    pub(super) state: Mutex<State<T>>,
    /// Signalled when the consumer takes a batch or the loader stops; workers wait on it.
    pub(super) room: Condvar,
    /// Signalled when a batch is built or a worker exits; the consumer waits on it.
    pub(super) arrived: Condvar,
}

pub(super) struct State<T: Batch> {
    /// The next batch of a dataset to claim.
    pub(super) next_claim: usize,
    /// Batches the consumer has taken off pinned memory (every batch below this one).
    pub(super) taken: usize,
    /// Built batches (or their errors) not taken yet.
    pub(super) built: BTreeMap<usize, Result<T::Pinned>>,
    /// Workers that have not exited.
    pub(super) running: usize,
    pub(super) stop: bool,
}

impl<T: Batch> Shared<T> {
    pub(super) fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until batch `i` is inside the window; false once the loader stops.
    pub(super) fn wait_for_room(&self, i: usize) -> bool {
        let mut st = self.lock();
        while !st.stop && i >= st.taken + self.window {
            st = self.room.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        !st.stop
    }

    /// Claims the next of `batches` dataset batches once it is inside the window; `None`
    /// when none is left or the loader stops.
    pub(super) fn claim(&self, batches: usize) -> Option<usize> {
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
    pub(super) fn deliver(&self, i: usize, batch: Result<T::Pinned>) {
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
    pub(super) fn take(&self, i: usize) -> Option<Result<T::Pinned>> {
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
    pub(super) fn taken(&self, taken: usize) {
        self.lock().taken = taken;
        self.room.notify_all();
    }

    pub(super) fn exited(&self) {
        self.lock().running -= 1;
        self.arrived.notify_all();
    }

    /// Stops the workers at their next claim and drops the batches nobody will take.
    pub(super) fn stop(&self) {
        let mut st = self.lock();
        st.stop = true;
        st.built.clear();
        self.room.notify_all();
    }
}
