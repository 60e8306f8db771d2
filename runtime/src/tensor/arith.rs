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
        let out = self.with_buffer(buf, out_shape);
        Ok(self.track2(rhs, out, name, |_| {
            let (a, b) = (self.saved(), rhs.saved());
            {
                move |g: Tensor<_, _>, [da, db]: [bool; 2]| {
                    let (ga, gb) = match op {
                        BinaryOp::Add => (g.clone(), g),
                        BinaryOp::Sub => (g.clone(), g.unary(UnaryOp::Neg)?),
                        BinaryOp::Mul => (if da { g.times(&b)? } else { g.clone() }, if db { g.times(&a)? } else { g }),
                        // d(a/b)/db = -a/b²
                        BinaryOp::Div => {
                            let gb = if db { g.times(&a)?.over(&b)?.over(&b)?.unary(UnaryOp::Neg)? } else { g.clone() };
                            (if da { g.over(&b)? } else { g }, gb)
                        }
                    };
                    let ga = if da { Some(ga.sum_to(a.shape())?) } else { None };
                    let gb = if db { Some(gb.sum_to(b.shape())?.placed(b.placement())?) } else { None };
                    Ok((ga, gb))
                }
            }
        }))
    }

    pub(crate) fn binary_scalar(&self, op: BinaryOp, rhs: T) -> Result<Self> {
        let buf = self.queued("an elementwise op")?.binary_scalar(op, T::DTYPE, self.numel(), rhs.to_scalar())?;
        let out = self.with_buffer(buf, self.shape.clone());
        Ok(self.track1(out, op.name(), |_| {
            move |g: Tensor<_, _>| match op {
                BinaryOp::Add | BinaryOp::Sub => Ok(g),
                BinaryOp::Mul => g.binary_scalar(BinaryOp::Mul, rhs),
                BinaryOp::Div => g.binary_scalar(BinaryOp::Div, rhs),
            }
        }))
    }

    pub(crate) fn unary(&self, op: UnaryOp) -> Result<Self> {
        let buf = self.queued("an elementwise op")?.unary(op, None, T::DTYPE, self.numel())?;
        let out = self.with_buffer(buf, self.shape.clone());
        Ok(self.track1(out, op.name(), |out| {
            let (x, y) = (self.saved(), out.saved());
            move |g: Tensor<_, _>| unary_grad(op, g, &x, &y)
        }))
    }
}

/// The gradient of `y = op(x)` given the gradient `g` of `y`.
fn unary_grad<D: Device, T: Element>(
    op: UnaryOp,
    g: Tensor<D, T>,
    x: &Tensor<D, T>,
    y: &Tensor<D, T>,
) -> Result<Tensor<D, T>> {
    match op {
        UnaryOp::Neg => g.unary(UnaryOp::Neg),
        UnaryOp::Relu => g.masked(&x.gt_scalar(T::ZERO)?),
        UnaryOp::Exp => g.times(y),
        UnaryOp::Sqrt => g.over(y)?.scaled(0.5),
        // sign(x): 0 at 0, as PyTorch's.
        UnaryOp::Abs => g.masked(&x.gt_scalar(T::ZERO)?)?.binary(BinaryOp::Sub, &g.masked(&x.lt_scalar(T::ZERO)?)?),
        UnaryOp::Square => g.times(x)?.scaled(2.0),
        UnaryOp::Log => g.over(x),
        UnaryOp::Sin => g.times(&x.unary(UnaryOp::Cos)?),
        UnaryOp::Cos => g.times(&x.unary(UnaryOp::Sin)?)?.unary(UnaryOp::Neg),
        UnaryOp::Tanh => g.times(&y.unary(UnaryOp::Square)?.rsub(1.0)?),
        UnaryOp::Sigmoid => g.times(y)?.times(&y.rsub(1.0)?),
        // One kernel each: gelu'(x) = Φ(x) + x φ(x); for the tanh form
        // y' = ½(1 + t) + ½x(1 − t²)·√(2/π)(1 + 3·0.044715x²), t = tanh(√(2/π)(x + 0.044715x³)).
        UnaryOp::Gelu | UnaryOp::GeluTanh => {
            let buf = x.queued(op.name())?.unary(op, Some(g.buffer()), T::DTYPE, x.numel())?;
            Ok(x.with_buffer(buf, x.shape.clone()))
        }
    }
}

macro_rules! tensor_op {
    ($Trait:ident, $method:ident, $op:expr) => {
        tensor_op!(@impl $Trait, $method, $op, &Tensor<E, U>, &Tensor<D, T>, |rhs| rhs);
        tensor_op!(@impl $Trait, $method, $op, Tensor<E, U>, &Tensor<D, T>, |rhs| &rhs);
        tensor_op!(@impl $Trait, $method, $op, &Tensor<E, U>, Tensor<D, T>, |rhs| rhs);
        tensor_op!(@impl $Trait, $method, $op, Tensor<E, U>, Tensor<D, T>, |rhs| &rhs);
        scalar_op!($Trait, $method, $op, f32, f64, i32, i64, u8, half::bf16, half::f16);
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
                self.binary($op, same_element::<E, U, T>($op.name(), $borrow)?)
            }
        }
    };
}

/// `t` typed with `T`, its own element type by the operator's `SameElement` bound: the
/// same reference, never a clone (a clone of the right operand cost each op an
/// allocation and two atomic counts, issue 35).
fn same_element<'t, E: Device, U: Element, T: Element>(
    op: &'static str,
    t: &'t Tensor<E, U>,
) -> Result<&'t Tensor<E, T>> {
    (t as &dyn std::any::Any)
        .downcast_ref()
        .ok_or_else(|| Error::InvalidArgument { op, reason: format!("operands of {} and {}", T::DTYPE, U::DTYPE) })
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
