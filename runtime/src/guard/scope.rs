//! [`DeviceGuard`], the scope in which a device is current, and [`IntoDeviceId`], the
//! values that name the device to enter (CUDA ordinals, device ids, `Dyn`). Entering
//! checks the device and pushes an entry on the thread's stack; dropping the guard
//! removes that entry, on every way out of the scope.

use std::marker::PhantomData;

use super::stack::{leave_entry, switch_to, STACK};
use crate::backend;
use crate::device::{Device, DeviceId, Dyn};
use crate::error::{Error, Result};

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
/// # if !locus::testing::needs_devices(2)? { return Ok(()); }
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
    pub(super) id: u64,
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
