//! `+ - * /` and unary `-` on tensors: tensor with tensor (owned or borrowed, NumPy
//! broadcasting) and tensor with scalar. Every operator returns `Result`, so a shape
//! mismatch is an `Err` and `(&a + &b)?` reads as it should.

use std::ops::{Add, Div, Mul, Neg, Sub};

use super::Tensor;
use crate::backend::{BinaryOp, UnaryOp};
use crate::device::Device;
use crate::element::{Element, SameElement};
use crate::error::{Error, Result};
use crate::placement::SamePlacement;
use crate::shape;

impl<D: Device, T: Element> Tensor<D, T> {
    pub(crate) fn binary<E: Device>(&self, op: BinaryOp, rhs: &Tensor<E, T>) -> Result<Self> {
        let name = op.name();
        self.same_device(name, rhs)?;
        let (out_shape, layout) = shape::broadcast(name, &self.shape, &rhs.shape, T::DTYPE)?;
        let buf = self.queued("an elementwise op")?.binary(rhs.buffer(), op, T::DTYPE, &out_shape, &layout)?;
        Ok(self.with_buffer(buf, out_shape))
    }

    pub(crate) fn binary_scalar(&self, op: BinaryOp, rhs: T) -> Result<Self> {
        let buf = self.queued("an elementwise op")?.binary_scalar(op, T::DTYPE, self.numel(), rhs.to_scalar())?;
        Ok(self.with_buffer(buf, self.shape.clone()))
    }

    pub(crate) fn unary(&self, op: UnaryOp) -> Result<Self> {
        let buf = self.queued("an elementwise op")?.unary(op, T::DTYPE, self.numel())?;
        Ok(self.with_buffer(buf, self.shape.clone()))
    }
}

macro_rules! tensor_op {
    ($Trait:ident, $method:ident, $op:expr) => {
        tensor_op!(@impl $Trait, $method, $op, &Tensor<E, U>, &Tensor<D, T>, |rhs| rhs);
        tensor_op!(@impl $Trait, $method, $op, Tensor<E, U>, &Tensor<D, T>, |rhs| &rhs);
        tensor_op!(@impl $Trait, $method, $op, &Tensor<E, U>, Tensor<D, T>, |rhs| rhs);
        tensor_op!(@impl $Trait, $method, $op, Tensor<E, U>, Tensor<D, T>, |rhs| &rhs);
        scalar_op!($Trait, $method, $op, f32, f64, i32, u8, half::bf16, half::f16);
    };
    (@impl $Trait:ident, $method:ident, $op:expr, $Rhs:ty, $Lhs:ty, |$rhs:ident| $borrow:expr) => {
        // `T: SameElement<U>` holds for `U = T` only; it is a bound (not one `T` on both
        // sides) so that a mixed op fails with its own message.
        impl<D, E, T, U> $Trait<$Rhs> for $Lhs
        where
            D: Device + SamePlacement<E>,
            E: Device,
            T: Element + SameElement<U>,
            U: Element,
        {
            type Output = Result<Tensor<D, T>>;
            fn $method(self, $rhs: $Rhs) -> Self::Output {
                self.binary($op, &same_element::<E, U, T>($op.name(), $borrow)?)
            }
        }
    };
}

/// `t` typed with `T`, its own element type by the operator's `SameElement` bound (a
/// handle to the same memory).
fn same_element<E: Device, U: Element, T: Element>(op: &'static str, t: &Tensor<E, U>) -> Result<Tensor<E, T>> {
    t.clone()
        .retyped()
        .map_err(|_| Error::InvalidArgument { op, reason: format!("operands of {} and {}", T::DTYPE, U::DTYPE) })
}

macro_rules! scalar_op {
    ($Trait:ident, $method:ident, $op:expr, $($t:ty),*) => {$(
        impl<D: Device> $Trait<$t> for &Tensor<D, $t> {
            type Output = Result<Tensor<D, $t>>;
            fn $method(self, rhs: $t) -> Self::Output {
                self.binary_scalar($op, rhs)
            }
        }
        impl<D: Device> $Trait<$t> for Tensor<D, $t> {
            type Output = Result<Tensor<D, $t>>;
            fn $method(self, rhs: $t) -> Self::Output {
                self.binary_scalar($op, rhs)
            }
        }
    )*};
}

tensor_op!(Add, add, BinaryOp::Add);
tensor_op!(Sub, sub, BinaryOp::Sub);
tensor_op!(Mul, mul, BinaryOp::Mul);
tensor_op!(Div, div, BinaryOp::Div);

impl<D: Device, T: Element> Neg for &Tensor<D, T> {
    type Output = Result<Tensor<D, T>>;
    fn neg(self) -> Self::Output {
        self.unary(UnaryOp::Neg)
    }
}

impl<D: Device, T: Element> Neg for Tensor<D, T> {
    type Output = Result<Tensor<D, T>>;
    fn neg(self) -> Self::Output {
        self.unary(UnaryOp::Neg)
    }
}
