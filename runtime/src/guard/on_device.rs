//! [`OnDevice`], a future that runs with its device current: its guard is entered
//! around every poll and left between polls, and the guards the inner future holds
//! across an `.await` are set aside between polls and put back for the next one, so
//! they are current inside that future only, whichever thread polls it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::stack::{follow, leave_entry, Entry, STACK};
use super::DeviceGuard;
use crate::device::DeviceId;
use crate::error::Result;

/// A future that runs with `device` current: the guard is entered around every poll
/// of the inner future and left between polls, so the future sees its own device
/// whichever thread polls it and whatever other futures run in between.
///
/// Guards the inner future enters and holds across an `.await` are set aside between
/// polls and put back on top of the future's own device for the next one: they are
/// current inside the future only, as its own device is.
///
/// Resolves to `Err` if the device cannot be entered (`Error::NoSuchDevice`), without
/// polling the inner future. `async fn`s under `#[on_device]` are wrapped in this.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use std::future::Future;
/// use std::task::{Context, Poll, Waker};
/// use locus::{current_device, DeviceId, OnDevice};
///
/// let mut fut = Box::pin(OnDevice::new(DeviceId::Cuda(0), async { current_device() }));
/// let mut cx = Context::from_waker(Waker::noop());
/// assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(Ok(DeviceId::Cuda(0))));
/// assert_eq!(current_device(), DeviceId::Cpu);
/// ```
#[must_use = "futures do nothing unless polled"]
#[derive(Debug)]
pub struct OnDevice<F> {
    /// An `Err` here (a bad run-time ordinal) is what the future resolves to.
    device: Result<DeviceId>,
    inner: F,
    /// The inner future's guards alive at the end of its last poll, outermost first.
    suspended: Vec<Entry>,
}

impl<F: Future> OnDevice<F> {
    /// `inner`, run with `device` current.
    pub fn new(device: DeviceId, inner: F) -> Self {
        OnDevice::checked(Ok(device), inner)
    }

    /// `inner`, run with `device` current, or resolving to the error `device` holds.
    pub(crate) fn checked(device: Result<DeviceId>, inner: F) -> Self {
        OnDevice { device, inner, suspended: Vec::new() }
    }
}

/// One poll of an [`OnDevice`]: its own entry with its suspended guards back on top.
/// Dropping it (also when the poll panics) sets the guards above the own entry aside
/// again and removes the own entry.
struct Polling<'a> {
    id: u64,
    suspended: &'a mut Vec<Entry>,
    /// The inner future is done: guards it entered and did not drop went out with its
    /// output, and stay on the stack.
    finished: bool,
}

impl<'a> Polling<'a> {
    fn enter(device: DeviceId, suspended: &'a mut Vec<Entry>) -> Result<Self> {
        // The entry is removed by `Polling`'s drop, not the guard's.
        let id = std::mem::ManuallyDrop::new(DeviceGuard::enter(device)?).id;
        if !suspended.is_empty() {
            let (before, now) = STACK.with_borrow_mut(|s| {
                let before = s.top();
                s.entries.append(suspended);
                (before, s.top())
            });
            follow(before, now);
        }
        Ok(Polling { id, suspended, finished: false })
    }
}

impl Drop for Polling<'_> {
    fn drop(&mut self) {
        if self.finished {
            return leave_entry(self.id);
        }
        let _ = STACK.try_with(|stack| {
            let mut s = stack.borrow_mut();
            let Some(at) = s.find(self.id) else { return };
            let before = s.top();
            self.suspended.extend(s.entries.drain(at + 1..));
            s.entries.pop();
            let now = s.top();
            drop(s);
            follow(before, now);
        });
    }
}

impl<F: Future> Future for OnDevice<F> {
    type Output = Result<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: only `inner` is structurally pinned, and it is never moved out of a
        // pinned `OnDevice`: it is reached below through `Pin::new_unchecked` alone,
        // `OnDevice` has no `Drop` impl, and it is `Unpin` only when `F` is.
        let this = unsafe { self.get_unchecked_mut() };
        let device = match &this.device {
            Ok(d) => *d,
            Err(e) => return Poll::Ready(Err(e.clone())),
        };
        let mut polling = match Polling::enter(device, &mut this.suspended) {
            Ok(p) => p,
            Err(e) => return Poll::Ready(Err(e)),
        };
        // SAFETY: `inner` is pinned with `self` (see above) and stays where it is.
        let out = unsafe { Pin::new_unchecked(&mut this.inner) }.poll(cx);
        polling.finished = out.is_ready();
        drop(polling);
        out.map(Ok)
    }
}
