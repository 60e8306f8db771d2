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

use crate::device::DeviceId;

mod on_device;
mod scope;
mod stack;
#[cfg(test)]
mod tests;

use stack::{Stack, STACK};

pub use on_device::OnDevice;
pub use scope::{DeviceGuard, IntoDeviceId};

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
