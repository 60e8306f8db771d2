//! `+ - * /` and unary `-` on tensors: tensor with tensor (owned or borrowed, NumPy
//! broadcasting) and tensor with scalar. Every operator returns `Result`, so a shape
//! mismatch is an `Err` and `(&a + &b)?` reads as it should.

use std::ops::{Add, Div, Mul, Neg, Sub};

use super::Tensor;
use crate::backend::{BackendStorage, BinaryOp, UnaryOp};
use crate::device::Device;
use crate::element::Element;
use crate::error::Result;
use crate::placement::SamePlacement;
use crate::shape;

impl<D: Device, T: Element> Tensor<D, T> {
    pub(crate) fn binary<E: Device>(&self, op: BinaryOp, rhs: &Tensor<E, T>) -> Result<Self> {
        let name = op.name();
        self.same_device(name, rhs)?;
        let (out_shape, layout) = shape::broadcast(name, &self.shape, &rhs.shape, T::DTYPE)?;
        let buf = self.buffer().binary(rhs.buffer(), op, T::DTYPE, &out_shape, &layout)?;
        Ok(self.with_buffer(buf, out_shape))
    }

    pub(crate) fn binary_scalar(&self, op: BinaryOp, rhs: T) -> Result<Self> {
        let buf = self.buffer().binary_scalar(op, T::DTYPE, self.numel(), rhs.to_scalar())?;
        Ok(self.with_buffer(buf, self.shape.clone()))
    }

    pub(crate) fn unary(&self, op: UnaryOp) -> Result<Self> {
        let buf = self.buffer().unary(op, T::DTYPE, self.numel())?;
        Ok(self.with_buffer(buf, self.shape.clone()))
    }
}

macro_rules! tensor_op {
    ($Trait:ident, $method:ident, $op:expr) => {
        impl<D, E, T> $Trait<&Tensor<E, T>> for &Tensor<D, T>
        where
            D: Device + SamePlacement<E>,
            E: Device,
            T: Element,
        {
            type Output = Result<Tensor<D, T>>;
            fn $method(self, rhs: &Tensor<E, T>) -> Self::Output {
                self.binary($op, rhs)
            }
        }
        impl<D, E, T> $Trait<Tensor<E, T>> for &Tensor<D, T>
        where
            D: Device + SamePlacement<E>,
            E: Device,
            T: Element,
        {
            type Output = Result<Tensor<D, T>>;
            fn $method(self, rhs: Tensor<E, T>) -> Self::Output {
                self.binary($op, &rhs)
            }
        }
        impl<D, E, T> $Trait<&Tensor<E, T>> for Tensor<D, T>
        where
            D: Device + SamePlacement<E>,
            E: Device,
            T: Element,
        {
            type Output = Result<Tensor<D, T>>;
            fn $method(self, rhs: &Tensor<E, T>) -> Self::Output {
                self.binary($op, rhs)
            }
        }
        impl<D, E, T> $Trait<Tensor<E, T>> for Tensor<D, T>
        where
            D: Device + SamePlacement<E>,
            E: Device,
            T: Element,
        {
            type Output = Result<Tensor<D, T>>;
            fn $method(self, rhs: Tensor<E, T>) -> Self::Output {
                self.binary($op, &rhs)
            }
        }
        scalar_op!($Trait, $method, $op, f32, f64, i32, u8);
    };
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
