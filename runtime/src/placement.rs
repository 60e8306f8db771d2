//! The compile-time same-placement rules.
//!
//! Every op taking two tensors requires `L: SamePlacement<R>` of the operands'
//! placements; work queued on a stream requires [`SameStreamDevice`] of the tensor and
//! the stream, and events [`SameEventDevice`]. Each trait carries its own diagnostic, so
//! mixing two GPUs (or a GPU and the host) fails to compile with a message naming both
//! placements and the fix.
//!
//! Each placement (a role too) implements each trait for itself, for [`Dyn`] (checked at run time),
//! and for a hidden uninhabited placement. The last impl is never used: it stops rustc
//! from inferring the other placement from a single impl, which would turn the error
//! into a bare type mismatch and lose the message.

use crate::device::{Cpu, Cuda, Dyn, Pinned};
use crate::role::Role;

/// `Self` and `Rhs` may be operands of one op.
///
/// ```text
/// use locus::{Cuda, Tensor};
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

/// A later operand on `Self` may join an op whose first operand is on `First`: the rule of
/// [`SamePlacement`] for ops whose placements come from several arguments (`where_`'s
/// mask and two branches), so that the error points at the operand that is elsewhere.
#[diagnostic::on_unimplemented(
    message = "tensors on `{First}` and `{Self}` cannot be used in one op",
    label = "this operand is on `{Self}`, the first on `{First}`",
    note = "locus never moves data between placements implicitly: copy this operand first, e.g. `.to::<{First}>()`"
)]
pub trait PlacedWith<First> {}

/// A stream of `S` may order work on a tensor on `Self`.
///
/// ```text
/// use locus::{Cuda, Stream, Tensor};
/// let t = Tensor::<Cuda<0>>::zeros([2]).unwrap();
/// let s = Stream::<Cuda<1>>::new().unwrap();
/// t.record_stream(&s).unwrap(); // a stream of `Cuda<1>` cannot order work on a tensor on `Cuda<0>`
/// ```
#[diagnostic::on_unimplemented(
    message = "a stream of `{S}` cannot order work on a tensor on `{Self}`",
    label = "this stream is of `{S}`, the tensor is on `{Self}`",
    note = "a stream runs work on its own device only: make a stream of the tensor's device, `Stream::<{Self}>::new()`, or copy the tensor first with `.to::<{S}>()`"
)]
pub trait SameStreamDevice<S> {}

/// An event of `Self` may be recorded on, or waited for by, a stream of `S`.
///
/// ```text
/// use locus::{Cuda, Event, Stream};
/// let e = Event::<Cuda<0>>::new().unwrap();
/// let s = Stream::<Cuda<1>>::new().unwrap();
/// s.wait_event(&e).unwrap(); // an event of `Cuda<0>` cannot be used on a stream of `Cuda<1>`
/// ```
#[diagnostic::on_unimplemented(
    message = "an event of `{Self}` cannot be used on a stream of `{S}`",
    label = "the stream is of `{S}`, the event of `{Self}`",
    note = "an event orders the streams of its own device only: use a stream of `{Self}`, e.g. `Stream::<{Self}>::new()`, or wait for the event on the host with `.synchronize()`"
)]
pub trait SameEventDevice<S> {}

/// A graph of `Self` may capture a tensor on `Other`, or replay on a stream of `Other`.
///
/// ```text
/// use locus::{Cuda, Graph, Stream, Tensor};
/// let s = Stream::<Cuda<0>>::new().unwrap();
/// let mut x = Tensor::<Cuda<1>>::zeros([2]).unwrap();
/// let g = Graph::capture(&s, &mut x, |x| x + 1.0); // a graph on `Cuda<0>` cannot use a tensor or stream of `Cuda<1>`
/// ```
#[diagnostic::on_unimplemented(
    message = "a graph on `{Other}` cannot use a tensor or stream of `{Self}`",
    label = "this is of `{Self}`, the graph captures work on `{Other}`",
    note = "a graph captures and replays the work of one device: use tensors and streams of `{Other}` with it (copy a tensor with `.to::<{Other}>()`), or capture a graph of its own on `{Self}`"
)]
pub trait SameGraphDevice<Other> {}

/// A tensor on `Self` may be an argument of a kernel launch whose first tensor is on
/// `First` (`#[locus::kernel]` fns bound each later tensor's placement by it).
#[diagnostic::on_unimplemented(
    message = "the tensors of one kernel launch are on `{First}` and `{Self}`",
    label = "this tensor is on `{Self}`, the launch's first tensor on `{First}`",
    note = "a kernel runs on one device, and locus never moves data between placements implicitly: copy this tensor first, `.to::<{First}>()`"
)]
pub trait SameKernelDevice<First> {}

/// Never a real placement; see the module docs.
#[doc(hidden)]
pub enum Unplaced {}

macro_rules! placement_rule {
    ($($Trait:ident),*) => {$(
        placement_rule!(@static $Trait: Cpu, Pinned, const N => Cuda<N>);
        #[diagnostic::do_not_recommend]
        impl $Trait<Dyn> for Dyn {}
        #[diagnostic::do_not_recommend]
        impl $Trait<Unplaced> for Dyn {}
        // A role meets itself and `Dyn`, never another role or a GPU ordinal, even one
        // bound to the same device: the conversion is explicit, as between two GPUs.
        #[diagnostic::do_not_recommend]
        impl<R: Role> $Trait<R> for R {}
        #[diagnostic::do_not_recommend]
        impl<R: Role> $Trait<Unplaced> for R {}
        #[diagnostic::do_not_recommend]
        impl<R: Role> $Trait<Dyn> for R {}
        #[diagnostic::do_not_recommend]
        impl<R: Role> $Trait<R> for Dyn {}
    )*};
    (@static $Trait:ident: $($(const $n:ident =>)? $p:ty),*) => {$(
        #[diagnostic::do_not_recommend]
        impl$(<const $n: usize>)? $Trait<$p> for $p {}
        #[diagnostic::do_not_recommend]
        impl$(<const $n: usize>)? $Trait<Unplaced> for $p {}
        // Checked at run time.
        #[diagnostic::do_not_recommend]
        impl$(<const $n: usize>)? $Trait<Dyn> for $p {}
        #[diagnostic::do_not_recommend]
        impl$(<const $n: usize>)? $Trait<$p> for Dyn {}
    )*};
}
placement_rule!(SamePlacement, PlacedWith, SameStreamDevice, SameEventDevice, SameGraphDevice, SameKernelDevice);
