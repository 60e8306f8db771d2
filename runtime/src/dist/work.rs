//! [`Work`]: a collective started by an `_async` call of a
//! [`ProcessGroup`](super::ProcessGroup), PyTorch's `Work` of `async_op=True`.

use std::fmt;
use std::sync::mpsc;

use crate::device::Dyn;
use crate::error::{Error, Result};
use crate::stream::Event;

/// A collective in flight; [`wait`](Work::wait) gives its result.
///
/// On a communicator (NCCL, the cuda backend) the collective is queued on the group's
/// communication stream and the result is there at once: its tensors record that stream
/// as their writer, so any use of them on another stream waits for the collective on the
/// device (an event, as for every op), with no host wait. On the TCP path the group's
/// worker thread runs it while this thread goes on; `wait` blocks until it is done.
///
/// Dropping a `Work`, or `mem::forget` of it, is safe: the collective still runs, and
/// the inputs it reads are its own references (a tensor written in place while one is in
/// flight gets its own memory first, as every shared tensor does).
#[must_use = "a collective's result comes from `wait`"]
pub struct Work<R> {
    state: State<R>,
}

enum State<R> {
    /// Queued on a stream; `end` is recorded after it.
    Queued { value: R, end: Event<Dyn> },
    /// Running on the group's worker thread.
    Running(mpsc::Receiver<Result<R>>),
    /// Done on the worker (seen by `is_complete`).
    Finished(Result<R>),
}

impl<R> fmt::Debug for Work<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            State::Queued { .. } => "queued on a stream",
            State::Running(_) => "running on the group's worker",
            State::Finished(_) => "finished",
        };
        write!(f, "Work({state})")
    }
}

fn stopped() -> Error {
    Error::Dist { op: "wait", reason: "the group's worker thread stopped before finishing this collective".into() }
}

impl<R> Work<R> {
    pub(crate) fn queued(value: R, end: Event<Dyn>) -> Self {
        Work { state: State::Queued { value, end } }
    }

    pub(crate) fn finished(r: Result<R>) -> Self {
        Work { state: State::Finished(r) }
    }

    pub(crate) fn running(rx: mpsc::Receiver<Result<R>>) -> Self {
        Work { state: State::Running(rx) }
    }

    /// The result. On the TCP path this blocks until the exchange is done (its error, if
    /// it failed); on a stream it returns at once, the result ordered after the collective
    /// on the device.
    pub fn wait(self) -> Result<R> {
        match self.state {
            State::Queued { value, .. } => Ok(value),
            State::Running(rx) => rx.recv().unwrap_or_else(|_| Err(stopped())),
            State::Finished(r) => r,
        }
    }

    /// Whether the collective has finished (on the device, for a queued one).
    pub fn is_complete(&mut self) -> Result<bool> {
        match &self.state {
            State::Queued { end, .. } => end.is_complete(),
            State::Finished(_) => Ok(true),
            State::Running(rx) => match rx.try_recv() {
                Ok(r) => {
                    self.state = State::Finished(r);
                    Ok(true)
                }
                Err(mpsc::TryRecvError::Empty) => Ok(false),
                Err(mpsc::TryRecvError::Disconnected) => {
                    self.state = State::Finished(Err(stopped()));
                    Ok(true)
                }
            },
        }
    }

    /// Waits on the host until the collective has finished, and gives its result.
    pub fn synchronize(self) -> Result<R> {
        if let State::Queued { end, .. } = &self.state {
            end.synchronize()?;
        }
        self.wait()
    }
}
