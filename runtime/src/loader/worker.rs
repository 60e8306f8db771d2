//! The loader's worker threads: each claims batch numbers in turn, inside the window,
//! builds and pins the batch, and delivers it. A worker's error or panic becomes a
//! `LoaderWorker` error at that batch, which the consumer receives in order.

use std::panic::{catch_unwind, AssertUnwindSafe};

use super::window::{Shared, Source};
use super::Batch;
use crate::error::{Error, Result};

/// One worker: claims batch numbers in turn, inside the window, and delivers each pinned
/// batch (or its error).
pub(super) fn work<T: Batch>(shared: &Shared<T>) {
    loop {
        let (i, batch) = match &shared.source {
            Source::Dataset { gather, order, batch_size } => {
                let Some(i) = shared.claim(order.len().div_ceil(*batch_size)) else { return };
                let samples = &order[i * batch_size..((i + 1) * batch_size).min(order.len())];
                let _build = crate::trace::Range::named_by(|| format!("build batch {i}"));
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
                    Ok(Some(pin)) => {
                        let _build = crate::trace::Range::named_by(|| format!("pin batch {i}"));
                        (i, catch(i, pin))
                    }
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
