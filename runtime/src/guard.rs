//! The current device of each thread, as `torch.cuda.device` keeps it.
//!
//! Every thread has a stack of devices. [`DeviceGuard::enter`] pushes one and dropping
//! the guard pops it, on every way out of a scope (return, `?`, panic unwinding).
//! [`current_device`] is the top of the stack, or `cpu` when the stack is empty.
//!
//! Ops on statically placed tensors never look at the stack: ops follow their tensor.
//! The stack is read by the current-device factories of `Tensor<Dyn>` and, on the cuda
//! backend, decides which CUDA context is current for the thread. `#[on_device]` and
//! `on_device!` expand to these guards.

use std::cell::RefCell;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::task::{Context, Poll};

use crate::backend::{self, Backend};
use crate::device::{Device, DeviceId, Dyn};
use crate::error::{Error, Result};

thread_local! {
    static STACK: RefCell<Vec<DeviceId>> = const { RefCell::new(Vec::new()) };
}

#[cfg(test)]
thread_local! {
    /// Backend `make_current` calls made by guards on this thread.
    static SWITCHES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Makes `device` current on `backend`, the one that runs it.
fn switch_to(backend: &dyn Backend, device: DeviceId) -> Result<()> {
    #[cfg(test)]
    SWITCHES.with(|n| n.set(n.get() + 1));
    backend.make_current(device)
}

/// The device of the innermost [`DeviceGuard`] on this thread; `cpu` when none is set.
///
/// ```
/// use locus_runtime::{current_device, DeviceGuard, DeviceId};
/// assert_eq!(current_device(), DeviceId::Cpu);
/// let guard = DeviceGuard::enter(DeviceId::Cuda(0))?;
/// assert_eq!(current_device(), DeviceId::Cuda(0));
/// drop(guard);
/// assert_eq!(current_device(), DeviceId::Cpu);
/// # Ok::<(), locus_runtime::Error>(())
/// ```
pub fn current_device() -> DeviceId {
    STACK.with_borrow(|s| s.last().copied().unwrap_or(DeviceId::Cpu))
}

/// A scope in which `device` is the current device of this thread (PyTorch's
/// `with torch.cuda.device(n):`).
///
/// Entering checks that the device exists and makes it current; dropping the guard
/// makes the previous device current again, also when the scope is left by a panic.
/// Entering the device that is already current costs no backend call. A guard belongs
/// to the thread that made it (it is neither `Send` nor `Sync`).
///
/// ```
/// use locus_runtime::{current_device, DeviceGuard, DeviceId};
/// # let n = locus_runtime::device_count()?;
/// # if n < 2 { eprintln!("skipped: needs 2 devices, found {n}"); return Ok(()); }
/// let outer = DeviceGuard::enter(DeviceId::Cuda(0))?;
/// {
///     let _inner = DeviceGuard::enter("cuda:1".parse()?)?;
///     assert_eq!(current_device(), DeviceId::Cuda(1));
/// }
/// assert_eq!(current_device(), DeviceId::Cuda(0));
/// assert_eq!(outer.device(), DeviceId::Cuda(0));
/// assert!(DeviceGuard::enter(DeviceId::Cuda(99)).is_err());
/// # Ok::<(), locus_runtime::Error>(())
/// ```
#[must_use = "the device is current only while the guard lives"]
#[derive(Debug)]
pub struct DeviceGuard {
    device: DeviceId,
    /// The stack height below this guard's entry.
    depth: usize,
    _thread_bound: PhantomData<*const ()>,
}

impl DeviceGuard {
    /// Makes `device` current for this thread until the guard is dropped.
    ///
    /// `Error::NoSuchDevice` for a CUDA ordinal at or past [`device_count`](crate::device_count).
    pub fn enter(device: DeviceId) -> Result<DeviceGuard> {
        let backend = backend::for_device(device)?;
        if current_device() != device {
            switch_to(backend, device)?;
        }
        let depth = STACK.with_borrow_mut(|s| {
            s.push(device);
            s.len() - 1
        });
        Ok(DeviceGuard { device, depth, _thread_bound: PhantomData })
    }

    /// Makes the device named by `ordinal` current: a CUDA ordinal (`u32`, `usize`,
    /// `i32`), a [`DeviceId`] or a [`Dyn`] placement.
    ///
    /// ```
    /// use locus_runtime::{current_device, DeviceGuard, DeviceId};
    /// let rank: usize = 0;
    /// let _g = DeviceGuard::enter_ordinal(rank)?;
    /// assert_eq!(current_device(), DeviceId::Cuda(0));
    /// assert!(DeviceGuard::enter_ordinal(-1).is_err());
    /// # Ok::<(), locus_runtime::Error>(())
    /// ```
    pub fn enter_ordinal(ordinal: impl IntoDeviceId) -> Result<DeviceGuard> {
        DeviceGuard::enter(ordinal.into_device_id()?)
    }

    /// The device this guard made current.
    pub fn device(&self) -> DeviceId {
        self.device
    }

    /// Runs `f` with `device` current, then makes the previous device current again.
    ///
    /// ```
    /// use locus_runtime::{current_device, DeviceGuard, DeviceId};
    /// let seen = DeviceGuard::run(DeviceId::Cuda(0), current_device)?;
    /// assert_eq!(seen, DeviceId::Cuda(0));
    /// assert_eq!(current_device(), DeviceId::Cpu);
    /// # Ok::<(), locus_runtime::Error>(())
    /// ```
    pub fn run<R>(device: DeviceId, f: impl FnOnce() -> R) -> Result<R> {
        let _guard = DeviceGuard::enter(device)?;
        Ok(f())
    }
}

impl Drop for DeviceGuard {
    fn drop(&mut self) {
        // `try_with`: a guard dropped while the thread's locals are torn down has
        // nothing left to restore.
        let _ = STACK.try_with(|stack| {
            let mut s = stack.borrow_mut();
            if s.len() <= self.depth {
                // An outer guard dropped first already unwound this one.
                return;
            }
            let top = s.last().copied();
            s.truncate(self.depth);
            let now = s.last().copied().unwrap_or(DeviceId::Cpu);
            drop(s);
            if top != Some(now) {
                // The device existed when it was entered; a failure here has no caller
                // to go to, and the next guard or op reports it.
                let _ = backend::for_device(now).and_then(|b| switch_to(b, now));
            }
        });
    }
}

/// A value that names a device: a CUDA ordinal or a device id. What
/// `#[on_device(dyn expr)]` and `on_device!(dyn expr => ..)` accept.
///
/// ```
/// use locus_runtime::{DeviceId, Dyn, IntoDeviceId};
/// assert_eq!(2u32.into_device_id()?, DeviceId::Cuda(2));
/// assert_eq!(DeviceId::Pinned.into_device_id()?, DeviceId::Pinned);
/// assert_eq!(Dyn::new(DeviceId::Cpu).into_device_id()?, DeviceId::Cpu);
/// assert!((-3i32).into_device_id().is_err());
/// # Ok::<(), locus_runtime::Error>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` does not name a device",
    label = "expected a CUDA ordinal or a `DeviceId`",
    note = "a run-time device is a `u32`, `usize` or `i32` CUDA ordinal, a `DeviceId` (`\"cuda:1\".parse::<DeviceId>()?`) or a `Dyn`"
)]
pub trait IntoDeviceId {
    /// The device, or an error for a negative ordinal.
    fn into_device_id(self) -> Result<DeviceId>;
}

impl IntoDeviceId for DeviceId {
    fn into_device_id(self) -> Result<DeviceId> {
        Ok(self)
    }
}

impl IntoDeviceId for Dyn {
    fn into_device_id(self) -> Result<DeviceId> {
        Ok(self.id())
    }
}

impl IntoDeviceId for u32 {
    fn into_device_id(self) -> Result<DeviceId> {
        Ok(DeviceId::Cuda(self))
    }
}

impl IntoDeviceId for usize {
    fn into_device_id(self) -> Result<DeviceId> {
        // Past u32 saturates, so it can never alias a real device (as `Cuda<N>` does).
        Ok(DeviceId::Cuda(u32::try_from(self).unwrap_or(u32::MAX)))
    }
}

impl IntoDeviceId for i32 {
    fn into_device_id(self) -> Result<DeviceId> {
        u32::try_from(self).map(DeviceId::Cuda).map_err(|_| Error::InvalidArgument {
            op: "on_device",
            reason: format!("device ordinal {self} is negative; CUDA ordinals start at 0"),
        })
    }
}

macro_rules! by_reference {
    ($($t:ty),*) => {$(
        impl IntoDeviceId for &$t {
            fn into_device_id(self) -> Result<DeviceId> {
                (*self).into_device_id()
            }
        }
    )*};
}
by_reference!(DeviceId, Dyn, u32, usize, i32);

/// A future that runs with `device` current: the guard is entered around every poll
/// of the inner future and left between polls, so the future sees its own device
/// whichever thread polls it and whatever other futures run in between.
///
/// Resolves to `Err` if the device cannot be entered (`Error::NoSuchDevice`), without
/// polling the inner future. `async fn`s under `#[on_device]` are wrapped in this.
///
/// ```
/// use std::future::Future;
/// use std::task::{Context, Poll, Waker};
/// use locus_runtime::{current_device, DeviceId, OnDevice};
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
}

impl<F: Future> OnDevice<F> {
    /// `inner`, run with `device` current.
    pub fn new(device: DeviceId, inner: F) -> Self {
        OnDevice { device: Ok(device), inner }
    }

    /// `inner`, run with `device` current, or resolving to the error `device` holds.
    pub(crate) fn checked(device: Result<DeviceId>, inner: F) -> Self {
        OnDevice { device, inner }
    }
}

impl<F: Future> Future for OnDevice<F> {
    type Output = Result<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let device = match &self.device {
            Ok(d) => *d,
            Err(e) => return Poll::Ready(Err(e.clone())),
        };
        // SAFETY: `inner` is structurally pinned: it is never moved out of a pinned
        // `OnDevice`, `OnDevice` has no `Drop` impl, and it is `Unpin` only when `F` is.
        let inner = unsafe { self.map_unchecked_mut(|s| &mut s.inner) };
        let _guard = match DeviceGuard::enter(device) {
            Ok(g) => g,
            Err(e) => return Poll::Ready(Err(e)),
        };
        inner.poll(cx).map(Ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn switches() -> usize {
        SWITCHES.with(|n| n.get())
    }

    #[test]
    fn entering_the_current_device_makes_no_backend_call() {
        let before = switches();
        let outer = DeviceGuard::enter(DeviceId::Cuda(0)).unwrap();
        assert_eq!(switches(), before + 1);
        for _ in 0..10 {
            let _same = DeviceGuard::enter(DeviceId::Cuda(0)).unwrap();
        }
        assert_eq!(switches(), before + 1, "same-device guards must not switch");
        drop(outer);
        assert_eq!(switches(), before + 2, "leaving cuda:0 for cpu switches once");
    }

    #[test]
    fn dropping_an_outer_guard_first_unwinds_the_inner_one() {
        let outer = DeviceGuard::enter(DeviceId::Cuda(0)).unwrap();
        let inner = DeviceGuard::enter(DeviceId::Pinned).unwrap();
        drop(outer);
        assert_eq!(current_device(), DeviceId::Cpu);
        drop(inner);
        assert_eq!(current_device(), DeviceId::Cpu);
    }

    #[test]
    fn a_leaked_guard_is_unwound_by_the_guard_below_it() {
        let outer = DeviceGuard::enter(DeviceId::Pinned).unwrap();
        std::mem::forget(DeviceGuard::enter(DeviceId::Cuda(0)).unwrap());
        assert_eq!(current_device(), DeviceId::Cuda(0));
        drop(outer);
        assert_eq!(current_device(), DeviceId::Cpu);
    }

    #[test]
    fn a_missing_device_leaves_the_stack_alone() {
        let err = DeviceGuard::enter(DeviceId::Cuda(4096)).unwrap_err();
        assert!(matches!(err, Error::NoSuchDevice { ordinal: 4096, .. }));
        assert_eq!(current_device(), DeviceId::Cpu);
    }
}
