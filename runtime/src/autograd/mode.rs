//! Whether ops record the tape: on by default, off inside a [`NoGrad`] scope (PyTorch's
//! `torch.no_grad()`), per thread.

use std::cell::Cell;
use std::marker::PhantomData;

thread_local! {
    static ENABLED: Cell<bool> = const { Cell::new(true) };
}

/// Whether ops on this thread record gradients now (`torch.is_grad_enabled()`).
///
/// ```
/// # extern crate locus_runtime as locus;
/// assert!(locus::is_grad_enabled());
/// let guard = locus::no_grad();
/// assert!(!locus::is_grad_enabled());
/// drop(guard);
/// assert!(locus::is_grad_enabled());
/// ```
pub fn is_grad_enabled() -> bool {
    ENABLED.with(Cell::get)
}

/// A scope in which ops record no gradients: their results track none, whatever their
/// inputs (PyTorch's `torch.no_grad()`). Made by [`no_grad`]; the previous mode comes back
/// when it drops. A guard given to `mem::forget` leaves gradients off on this thread
/// (a mode, not a safety rule: nothing else depends on it).
#[must_use = "gradients are off only while the guard lives"]
pub struct NoGrad {
    before: bool,
    /// Thread-local state: the guard stays on its thread.
    _not_send: PhantomData<*const ()>,
}

/// Turns gradient recording off on this thread until the guard drops.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Cpu, Param, Tensor};
/// let w = Param::new(Tensor::<Cpu>::ones([2])?);
/// let y = {
///     let _g = locus::no_grad();
///     (&*w * 2.0)?
/// };
/// assert!(!y.tracks_grad());
/// # Ok::<(), locus::Error>(())
/// ```
pub fn no_grad() -> NoGrad {
    set(false)
}

/// Turns gradient recording back on inside a [`no_grad`] scope (`torch.enable_grad()`).
pub fn enable_grad() -> NoGrad {
    set(true)
}

fn set(on: bool) -> NoGrad {
    let before = ENABLED.with(|e| e.replace(on));
    NoGrad { before, _not_send: PhantomData }
}

impl Drop for NoGrad {
    fn drop(&mut self) {
        ENABLED.with(|e| e.set(self.before));
    }
}

/// Runs a block with gradient recording off and gives its value (the macro form of
/// [`no_grad`]).
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Cpu, Param, Tensor};
/// let w = Param::new(Tensor::<Cpu>::ones([2])?);
/// let y = locus::no_grad!({ w.exp() })?;
/// assert!(!y.tracks_grad());
/// # Ok::<(), locus::Error>(())
/// ```
#[macro_export]
macro_rules! no_grad {
    ($body:block) => {{
        let _no_grad = $crate::no_grad();
        $body
    }};
}
