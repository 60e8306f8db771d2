//! The compile-time same-placement rule.
//!
//! Every op taking two tensors requires `L: SamePlacement<R>` of the operands'
//! placements. The trait carries the diagnostic, so mixing two GPUs (or a GPU and the
//! host) fails to compile with a message naming both placements and the fix.
//!
//! Each placement implements the trait for itself, for [`Dyn`] (checked at run time),
//! and for a hidden uninhabited placement. The last impl is never used: it stops rustc
//! from inferring the right operand from a single impl, which would turn the error
//! into a bare type mismatch and lose the message.

use crate::device::{Cpu, Cuda, Dyn, Pinned};

/// `Self` and `Rhs` may be operands of one op.
///
/// ```compile_fail
/// use locus_runtime::{Cuda, Tensor};
/// let a = Tensor::<Cuda<0>>::zeros([2]).unwrap();
/// let b = Tensor::<Cuda<1>>::zeros([2]).unwrap();
/// let _ = &a + &b; // tensors on `Cuda<0>` and `Cuda<1>` cannot be used in one op
/// ```
#[diagnostic::on_unimplemented(
    message = "tensors on `{Self}` and `{Rhs}` cannot be used in one op",
    label = "this operand is on `{Rhs}`, the other on `{Self}`",
    note = "locus never moves data between placements implicitly: copy one side first, e.g. `.to::<{Self}>()` (or `.to::<{Rhs}>()` on the other)"
)]
pub trait SamePlacement<Rhs> {}

/// Never a real placement; see the module docs.
#[doc(hidden)]
pub enum Unplaced {}

macro_rules! same_placement {
    ($($(const $n:ident =>)? $p:ty),* $(,)?) => {$(
        #[diagnostic::do_not_recommend]
        impl$(<const $n: usize>)? SamePlacement<$p> for $p {}
        #[diagnostic::do_not_recommend]
        impl$(<const $n: usize>)? SamePlacement<Unplaced> for $p {}
    )*};
}
same_placement!(Cpu, Pinned, const N => Cuda<N>, Dyn);

macro_rules! checked_at_run_time {
    ($($(const $n:ident =>)? $p:ty),* $(,)?) => {$(
        #[diagnostic::do_not_recommend]
        impl$(<const $n: usize>)? SamePlacement<Dyn> for $p {}
        #[diagnostic::do_not_recommend]
        impl$(<const $n: usize>)? SamePlacement<$p> for Dyn {}
    )*};
}
checked_at_run_time!(Cpu, Pinned, const N => Cuda<N>);
