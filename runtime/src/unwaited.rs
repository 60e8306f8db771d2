//! Reading a [`Pending`] before waiting for it is a compile error that says to wait.
//!
//! A `Pending` tensor is still being written by an asynchronous copy. Without this
//! module, `pending.to_vec()` is "no method named `to_vec`" and `&pending + &x` "cannot
//! add", which do not say what to do. Here `Pending` gets the reading methods and the
//! operators of a tensor, each bound by [`Waited`], a trait that nothing implements and
//! whose message says to call `.wait()?`. None of them can ever be called.
//!
//! The operators come in several impls per trait, as the tensor ones do: with a single
//! impl, rustc would reject the operator before looking at the bound, and the message
//! would be lost.

use std::ops::{Add, Div, Mul, Neg, Sub};

use crate::backend::{BinaryOp, UnaryOp};
use crate::copy::{HostPlacement, Pending};
use crate::device::{Device, StaticDevice};
use crate::element::Element;
use crate::error::Result;
use crate::tensor::Tensor;

/// The value of a completed copy. Implemented by no type: a [`Pending`] value is read
/// only through [`Pending::wait`], and reading it any other way fails on this bound.
///
/// ```text
/// use locus::{Cuda, Stream, Tensor};
/// let s = Stream::<Cuda<0>>::new().unwrap();
/// let pending = Tensor::<Cuda<0>>::ones([2]).unwrap().to_pinned_async(&s).unwrap();
/// let _ = pending.to_vec(); // `Pending<Tensor<Pinned>>` is read before `.wait()`
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is read before `.wait()`",
    label = "still being copied: call `.wait()?` first",
    note = "an asynchronous copy writes into a `Pending` until it completes: `.wait()?` blocks until then and returns the `{V}` (`.is_ready()?` asks without blocking)"
)]
pub trait Waited<V>: sealed::Sealed {
    /// The completed value.
    fn waited(&self) -> &V;
}

mod sealed {
    pub trait Sealed {}
}

/// [`Waited`], asked of the other operand's placement `Self`, so that rustc cannot
/// decide it before that placement is known. Asked directly, a bound that no type meets
/// makes rustc drop the operator impl while it is still looking for one ("cannot add"),
/// and the message is lost.
pub trait DeferWaited<P, V> {
    /// The completed value.
    fn waited(pending: &P) -> &V;
}

impl<E, P: Waited<V>, V> DeferWaited<P, V> for E {
    fn waited(pending: &P) -> &V {
        pending.waited()
    }
}

/// The reading methods of a tensor, for the diagnostic only (hidden from the docs).
impl<D: Device, T: Element> Pending<Tensor<D, T>> {
    #[doc(hidden)]
    pub fn to_vec(&self) -> Result<Vec<T>>
    where
        Self: Waited<Tensor<D, T>>,
    {
        self.waited().to_vec()
    }

    #[doc(hidden)]
    pub fn item(&self) -> Result<T>
    where
        Self: Waited<Tensor<D, T>>,
    {
        self.waited().item()
    }

    #[doc(hidden)]
    pub fn shape(&self) -> &[usize]
    where
        Self: Waited<Tensor<D, T>>,
    {
        self.waited().shape()
    }

    #[doc(hidden)]
    pub fn to<E: StaticDevice>(&self) -> Result<Tensor<E, T>>
    where
        Self: Waited<Tensor<D, T>>,
    {
        self.waited().to::<E>()
    }
}

impl<D: HostPlacement, T: Element> Pending<Tensor<D, T>> {
    #[doc(hidden)]
    pub fn as_slice(&self) -> &[T]
    where
        Self: Waited<Tensor<D, T>>,
    {
        self.waited().as_slice()
    }
}

macro_rules! pending_op {
    ($Trait:ident, $method:ident, $op:expr) => {
        pending_op!(@lhs $Trait, $method, $op, &Pending<Tensor<D, T>>, &Tensor<E, T>);
        pending_op!(@lhs $Trait, $method, $op, &Pending<Tensor<D, T>>, Tensor<E, T>);
        pending_op!(@lhs $Trait, $method, $op, Pending<Tensor<D, T>>, &Tensor<E, T>);
        pending_op!(@lhs $Trait, $method, $op, Pending<Tensor<D, T>>, Tensor<E, T>);
        pending_op!(@rhs $Trait, $method, $op, &Tensor<D, T>, &Pending<Tensor<E, T>>);
        pending_op!(@rhs $Trait, $method, $op, &Tensor<D, T>, Pending<Tensor<E, T>>);
        pending_op!(@rhs $Trait, $method, $op, Tensor<D, T>, &Pending<Tensor<E, T>>);
        pending_op!(@rhs $Trait, $method, $op, Tensor<D, T>, Pending<Tensor<E, T>>);
        pending_op!(@scalar $Trait, $method, $op, f32, f64, i32, i64, u8, half::bf16, half::f16);
    };
    (@lhs $Trait:ident, $method:ident, $op:expr, $Lhs:ty, $Rhs:ty) => {
        impl<D: Device, E: Device, T: Element> $Trait<$Rhs> for $Lhs
        where
            E: DeferWaited<Pending<Tensor<D, T>>, Tensor<D, T>>,
        {
            type Output = Result<Tensor<D, T>>;
            #[allow(clippy::needless_borrow)]
            fn $method(self, rhs: $Rhs) -> Self::Output {
                E::waited(&self).binary($op, &rhs)
            }
        }
    };
    (@rhs $Trait:ident, $method:ident, $op:expr, $Lhs:ty, $Rhs:ty) => {
        impl<D: Device, E: Device, T: Element> $Trait<$Rhs> for $Lhs
        where
            Pending<Tensor<E, T>>: Waited<Tensor<E, T>>,
        {
            type Output = Result<Tensor<D, T>>;
            fn $method(self, rhs: $Rhs) -> Self::Output {
                self.binary($op, rhs.waited())
            }
        }
    };
    (@scalar $Trait:ident, $method:ident, $op:expr, $($t:ty),*) => {$(
        impl<D: Device> $Trait<$t> for &Pending<Tensor<D, $t>>
        where
            Pending<Tensor<D, $t>>: Waited<Tensor<D, $t>>,
        {
            type Output = Result<Tensor<D, $t>>;
            fn $method(self, rhs: $t) -> Self::Output {
                self.waited().binary_scalar($op, rhs)
            }
        }
        impl<D: Device> $Trait<$t> for Pending<Tensor<D, $t>>
        where
            Pending<Tensor<D, $t>>: Waited<Tensor<D, $t>>,
        {
            type Output = Result<Tensor<D, $t>>;
            fn $method(self, rhs: $t) -> Self::Output {
                self.waited().binary_scalar($op, rhs)
            }
        }
    )*};
}

pending_op!(Add, add, BinaryOp::Add);
pending_op!(Sub, sub, BinaryOp::Sub);
pending_op!(Mul, mul, BinaryOp::Mul);
pending_op!(Div, div, BinaryOp::Div);

impl<D: Device, T: Element> Neg for &Pending<Tensor<D, T>>
where
    Pending<Tensor<D, T>>: Waited<Tensor<D, T>>,
{
    type Output = Result<Tensor<D, T>>;
    fn neg(self) -> Self::Output {
        self.waited().unary(UnaryOp::Neg)
    }
}

impl<D: Device, T: Element> Neg for Pending<Tensor<D, T>>
where
    Pending<Tensor<D, T>>: Waited<Tensor<D, T>>,
{
    type Output = Result<Tensor<D, T>>;
    fn neg(self) -> Self::Output {
        self.waited().unary(UnaryOp::Neg)
    }
}
