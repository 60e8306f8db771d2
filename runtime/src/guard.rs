//! The current device of each thread, as `torch.cuda.device` keeps it.
//!
//! Every thread has a stack of devices. [`DeviceGuard::enter`] pushes one and dropping
//! the guard removes it, on every way out of a scope (return, `?`, panic unwinding).
//! [`current_device`] is the top of the stack, or `cpu` when the stack is empty.
//!
//! Guards may be dropped in any order: each entry carries its guard's id, a drop removes
//! that entry alone, and the current device is always that of the innermost guard still
//! alive (the backend is switched whenever the top changes). A guard given to
//! `mem::forget` stays alive for good: its device is current again once every guard
//! entered after it is gone, and the guards around it are unaffected.
//!
//! Ops on statically placed tensors never look at the stack: ops follow their tensor.
//! The stack is read by the current-device factories of `Tensor<Dyn>` and, on the cuda
//! backend, decides which CUDA context is current for the thread. `#[on_device]` and
//! `with_device!` expand to these guards.

use std::cell::RefCell;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use crate::backend::{self, BackendDevice};
use crate::device::{Device, DeviceId, Dyn};
use crate::error::{Error, Result};

/// One live guard: its id and device.
#[derive(Clone, Copy, Debug)]
struct Entry {
    id: u64,
    device: DeviceId,
}

/// The guards of one thread, innermost last.
struct Stack {
    entries: Vec<Entry>,
    /// The next id to give, and the end of the block of ids it comes from.
    next_id: u64,
    end_id: u64,
}

impl Stack {
    fn top(&self) -> DeviceId {
        self.entries.last().map_or(DeviceId::Cpu, |e| e.device)
    }

    #[inline]
    fn push(&mut self, device: DeviceId) -> u64 {
        if self.next_id == self.end_id {
            self.refill();
        }
        let id = self.next_id;
        self.next_id += 1;
        self.entries.push(Entry { id, device });
        id
    }

    #[cold]
    fn refill(&mut self) {
        self.next_id = ID_BLOCKS.fetch_add(ID_BLOCK, Ordering::Relaxed);
        self.end_id = self.next_id + ID_BLOCK;
    }

    /// Where the entry of guard `id` is (near the top when guards nest).
    fn find(&self, id: u64) -> Option<usize> {
        self.entries.iter().rposition(|e| e.id == id)
    }
}

/// Ids are unique across threads (a future's suspended guards may resume on another
/// one), handed out in blocks so that a thread touches the shared counter once per block.
static ID_BLOCKS: AtomicU64 = AtomicU64::new(0);
const ID_BLOCK: u64 = 1 << 16;

thread_local! {
    static STACK: RefCell<Stack> = const { RefCell::new(Stack { entries: Vec::new(), next_id: 0, end_id: 0 }) };
}

#[cfg(test)]
thread_local! {
    /// Backend `make_current` calls made by guards on this thread.
    static SWITCHES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// The device the last of those calls made current (cpu before any).
    static BACKEND_CURRENT: std::cell::Cell<DeviceId> = const { std::cell::Cell::new(DeviceId::Cpu) };
}

/// Makes `device` current on `backend`, the one that runs it.
fn switch_to(backend: &dyn BackendDevice, device: DeviceId) -> Result<()> {
    #[cfg(test)]
    SWITCHES.with(|n| n.set(n.get() + 1));
    backend.make_current(device)?;
    #[cfg(test)]
    BACKEND_CURRENT.with(|c| c.set(device));
    Ok(())
}

/// Makes the backend follow the top of the stack when it changed from `before` to `now`.
fn follow(before: DeviceId, now: DeviceId) {
    if before != now {
        // Every device on the stack existed when it was entered; a failure here has no
        // caller to go to, and the next guard or op reports it.
        let _ = backend::for_device(now).and_then(|b| switch_to(b, now));
    }
}

/// Removes the entry of guard `id`, if this thread's stack holds it.
fn leave_entry(id: u64) {
    // `try_with`: a guard dropped while the thread's locals are torn down has nothing
    // left to restore.
    let _ = STACK.try_with(|stack| {
        let mut s = stack.borrow_mut();
        match s.entries.last() {
            Some(top) if top.id == id => {
                let before = top.device;
                s.entries.pop();
                let now = s.top();
                drop(s);
                follow(before, now);
            }
            // A guard entered later is still alive and stays current. Not found: the
            // guard is suspended with the future that holds it (`OnDevice`).
            _ => {
                if let Some(at) = s.find(id) {
                    s.entries.remove(at);
                }
            }
        }
    });
}

/// The device of the innermost [`DeviceGuard`] on this thread; `cpu` when none is set.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{current_device, DeviceGuard, DeviceId};
/// assert_eq!(current_device(), DeviceId::Cpu);
/// let guard = DeviceGuard::enter(DeviceId::Cuda(0))?;
/// assert_eq!(current_device(), DeviceId::Cuda(0));
/// drop(guard);
/// assert_eq!(current_device(), DeviceId::Cpu);
/// # Ok::<(), locus::Error>(())
/// ```
pub fn current_device() -> DeviceId {
    STACK.with_borrow(Stack::top)
}

/// A scope in which `device` is the current device of this thread (PyTorch's
/// `with torch.cuda.device(n):`).
///
/// Entering checks that the device exists and makes it current; dropping the guard
/// makes the previous device current again, also when the scope is left by a panic.
/// Entering the device that is already current costs no backend call. A guard belongs
/// to the thread that made it (it is neither `Send` nor `Sync`).
///
/// Guards may be dropped in any order: a drop removes that guard's entry alone, and the
/// current device is always that of the innermost guard still alive. A guard given to
/// `mem::forget` stays alive for good: its device is current again once every guard
/// entered after it is gone, and the guards around it are unaffected.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{current_device, DeviceGuard, DeviceId};
/// # let n = locus::device_count()?;
/// # if n < 2 { eprintln!("skipped: needs 2 devices, found {n}"); return Ok(()); }
/// let outer = DeviceGuard::enter(DeviceId::Cuda(0))?;
/// {
///     let _inner = DeviceGuard::enter("cuda:1".parse()?)?;
///     assert_eq!(current_device(), DeviceId::Cuda(1));
/// }
/// assert_eq!(current_device(), DeviceId::Cuda(0));
/// assert_eq!(outer.device(), DeviceId::Cuda(0));
/// assert!(DeviceGuard::enter(DeviceId::Cuda(99)).is_err());
/// # Ok::<(), locus::Error>(())
/// ```
#[must_use = "the device is current only while the guard lives"]
#[derive(Debug)]
pub struct DeviceGuard {
    device: DeviceId,
    /// The id of this guard's entry on the stack.
    id: u64,
    _thread_bound: PhantomData<*const ()>,
}

impl DeviceGuard {
    /// Makes `device` current for this thread until the guard is dropped.
    ///
    /// `Error::NoSuchDevice` for a CUDA ordinal at or past [`device_count`](crate::device_count).
    pub fn enter(device: DeviceId) -> Result<DeviceGuard> {
        let backend = backend::for_device(device)?;
        // Entering the current device again, the common case, touches the stack once.
        let id = match STACK.with_borrow_mut(|s| (s.top() == device).then(|| s.push(device))) {
            Some(id) => id,
            None => {
                switch_to(backend, device)?;
                STACK.with_borrow_mut(|s| s.push(device))
            }
        };
        Ok(DeviceGuard { device, id, _thread_bound: PhantomData })
    }

    /// Makes the device named by `ordinal` current: a CUDA ordinal (`u32`, `usize`,
    /// `i32`), a [`DeviceId`] or a [`Dyn`] placement.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{current_device, DeviceGuard, DeviceId};
    /// let rank: usize = 0;
    /// let _g = DeviceGuard::enter_ordinal(rank)?;
    /// assert_eq!(current_device(), DeviceId::Cuda(0));
    /// assert!(DeviceGuard::enter_ordinal(-1).is_err());
    /// # Ok::<(), locus::Error>(())
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
    /// # extern crate locus_runtime as locus;
    /// use locus::{current_device, DeviceGuard, DeviceId};
    /// let seen = DeviceGuard::run(DeviceId::Cuda(0), current_device)?;
    /// assert_eq!(seen, DeviceId::Cuda(0));
    /// assert_eq!(current_device(), DeviceId::Cpu);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn run<R>(device: DeviceId, f: impl FnOnce() -> R) -> Result<R> {
        let _guard = DeviceGuard::enter(device)?;
        Ok(f())
    }
}

impl Drop for DeviceGuard {
    fn drop(&mut self) {
        leave_entry(self.id);
    }
}

/// A value that names a device: a CUDA ordinal or a device id. What
/// `#[on_device(dyn expr)]` and `with_device!(dyn expr => ..)` accept.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{DeviceId, Dyn, IntoDeviceId};
/// assert_eq!(2u32.into_device_id()?, DeviceId::Cuda(2));
/// assert_eq!(DeviceId::Pinned.into_device_id()?, DeviceId::Pinned);
/// assert_eq!(Dyn::new(DeviceId::Cpu).into_device_id()?, DeviceId::Cpu);
/// assert!((-3i32).into_device_id().is_err());
/// # Ok::<(), locus::Error>(())
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

    fn on_fresh_thread(f: impl FnOnce() + Send + 'static) {
        std::thread::spawn(f).join().unwrap();
    }

    fn backend_current() -> DeviceId {
        BACKEND_CURRENT.with(|c| c.get())
    }

    /// A second device besides `cuda:0`: `cuda:1` where it exists, else pinned memory
    /// (a host placement the guard enters the same way), so the tests run on one GPU.
    fn second() -> DeviceId {
        if crate::backend::device_count().unwrap_or(0) >= 2 {
            DeviceId::Cuda(1)
        } else {
            DeviceId::Pinned
        }
    }

    /// A device other than [`second`] and `cuda:0`.
    fn third() -> DeviceId {
        if second() == DeviceId::Pinned {
            DeviceId::Cpu
        } else {
            DeviceId::Pinned
        }
    }

    #[test]
    fn dropping_an_outer_guard_first_keeps_the_inner_one_current_without_a_switch() {
        on_fresh_thread(|| {
            let outer = DeviceGuard::enter(DeviceId::Cuda(0)).unwrap();
            let inner = DeviceGuard::enter(DeviceId::Pinned).unwrap();
            let before = switches();
            drop(outer);
            assert_eq!((current_device(), backend_current()), (DeviceId::Pinned, DeviceId::Pinned));
            assert_eq!(switches(), before, "the top did not change");
            drop(inner);
            assert_eq!((current_device(), backend_current()), (DeviceId::Cpu, DeviceId::Cpu));
        });
    }

    #[test]
    fn a_forgotten_guard_stays_current_after_the_guard_below_it_goes() {
        on_fresh_thread(|| {
            let outer = DeviceGuard::enter(DeviceId::Pinned).unwrap();
            std::mem::forget(DeviceGuard::enter(DeviceId::Cuda(0)).unwrap());
            drop(outer);
            assert_eq!((current_device(), backend_current()), (DeviceId::Cuda(0), DeviceId::Cuda(0)));
        });
    }

    /// Random enters, drops and forgets against a model: the current device, and the
    /// backend's, is that of the latest live guard.
    #[test]
    fn the_backend_follows_the_innermost_live_guard() {
        on_fresh_thread(|| {
            let devices = [DeviceId::Cpu, DeviceId::Pinned, DeviceId::Cuda(0), second()];
            let mut live: Vec<(DeviceId, Option<DeviceGuard>)> = Vec::new();
            let mut x = 0x9e37_79b9_7f4a_7c15_u64;
            for step in 0..5000 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let owned: Vec<usize> = (0..live.len()).filter(|&j| live[j].1.is_some()).collect();
                match x % 8 {
                    0..=3 => {
                        let d = devices[(x >> 8) as usize % 4];
                        live.push((d, Some(DeviceGuard::enter(d).unwrap())));
                    }
                    4..=6 if !owned.is_empty() => drop(live.remove(owned[(x >> 8) as usize % owned.len()])),
                    7 if !owned.is_empty() && live.len() < 8 => {
                        std::mem::forget(live[owned[(x >> 8) as usize % owned.len()]].1.take())
                    }
                    _ => {}
                }
                let expected = live.last().map_or(DeviceId::Cpu, |(d, _)| *d);
                assert_eq!(current_device(), expected, "step {step}");
                assert_eq!(backend_current(), expected, "backend at step {step}");
            }
        });
    }

    #[test]
    fn a_guard_held_across_polls_is_made_current_again_on_the_backend() {
        on_fresh_thread(|| {
            let mut seen = Vec::new();
            let mut fut = Box::pin(OnDevice::new(DeviceId::Cuda(0), async {
                let _inner = DeviceGuard::enter(second()).unwrap();
                let mut polled = false;
                std::future::poll_fn(|cx| {
                    if std::mem::replace(&mut polled, true) {
                        Poll::Ready(())
                    } else {
                        cx.waker().wake_by_ref();
                        Poll::Pending
                    }
                })
                .await;
                backend_current()
            }));
            let mut cx = Context::from_waker(std::task::Waker::noop());
            let _outside = DeviceGuard::enter(third()).unwrap();
            loop {
                let polled = fut.as_mut().poll(&mut cx);
                seen.push(backend_current());
                if let Poll::Ready(v) = polled {
                    assert_eq!(v.unwrap(), second());
                    break;
                }
            }
            assert_eq!(seen, vec![third(); 2]);
        });
    }

    #[test]
    fn a_guard_a_future_returns_stays_current_after_it() {
        on_fresh_thread(|| {
            let mut fut = Box::pin(OnDevice::new(DeviceId::Cuda(0), async { DeviceGuard::enter(second()) }));
            let Poll::Ready(Ok(Ok(guard))) = fut.as_mut().poll(&mut Context::from_waker(std::task::Waker::noop()))
            else {
                panic!("an async block without awaits is ready at once")
            };
            assert_eq!((current_device(), backend_current()), (second(), second()));
            drop(guard);
            assert_eq!((current_device(), backend_current()), (DeviceId::Cpu, DeviceId::Cpu));
        });
    }

    #[test]
    fn a_missing_device_leaves_the_stack_alone() {
        let err = DeviceGuard::enter(DeviceId::Cuda(4096)).unwrap_err();
        assert!(matches!(err, Error::NoSuchDevice { ordinal: 4096, .. }));
        assert_eq!(current_device(), DeviceId::Cpu);
    }
}
