//! Elementwise ops beyond the operators of `arith`: a scalar on the left of `+ - * /`
//! (`2.0 * x`), `abs`, `square`, `pow`, `clamp`, `exp`, `sqrt`, `sin` and `cos`. Each is one backend call over the
//! whole buffer; the ones with a parameter go through [`ParamOp`].

use std::ops::{Add, Div, Mul, Sub};

use super::Tensor;
use crate::backend::{BinaryOp, ParamOp, UnaryOp};
use crate::device::Device;
use crate::element::{Element, Float};
use crate::error::{Error, Result};

impl<D: Device, T: Element> Tensor<D, T> {
    /// `lhs op self`, elementwise: the scalar on the left.
    pub(crate) fn scalar_lhs(&self, op: BinaryOp, lhs: T) -> Result<Self> {
        let buf = self.queued("an elementwise op")?.scalar_binary(op, T::DTYPE, lhs.to_scalar(), self.numel())?;
        let out = self.with_buffer(buf, self.shape.clone());
        Ok(self.track1(out, op.name(), |_| {
            let x = self.saved();
            {
                move |g: Tensor<_, _>| match op {
                    BinaryOp::Add => Ok(g),
                    BinaryOp::Sub => g.unary(UnaryOp::Neg),
                    BinaryOp::Mul => g.binary_scalar(BinaryOp::Mul, lhs),
                    // d(s/x)/dx = -s/x²
                    BinaryOp::Div => g.binary_scalar(BinaryOp::Mul, lhs)?.over(&x)?.over(&x)?.unary(UnaryOp::Neg),
                }
            }
        }))
    }

    /// The absolute value elementwise. Integers wrap: `i32::MIN` stays `i32::MIN`, as
    /// in PyTorch.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let t = Tensor::<Cuda<0>, i32>::from_vec(vec![-3, 0, 4], [3])?;
    /// assert_eq!(t.abs()?.to_vec()?, vec![3, 0, 4]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn abs(&self) -> Result<Self> {
        self.unary(UnaryOp::Abs)
    }

    /// `x * x` elementwise (integers wrap).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu>::from_vec(vec![-3.0, 0.5], [2])?;
    /// assert_eq!(t.square()?.to_vec()?, vec![9.0, 0.25]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn square(&self) -> Result<Self> {
        self.unary(UnaryOp::Square)
    }

    /// Each element limited to `[min, max]` (PyTorch's `clamp`); NaN stays NaN. `min >
    /// max`, or a NaN bound, is an error.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let t = Tensor::<Cuda<0>>::from_vec(vec![-2.0, 0.5, 7.0], [3])?;
    /// assert_eq!(t.clamp(0.0, 1.0)?.to_vec()?, vec![0.0, 0.5, 1.0]);
    /// assert!(t.clamp(1.0, 0.0).is_err());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn clamp(&self, min: T, max: T) -> Result<Self> {
        // `None` (a NaN bound) fails too.
        if !matches!(min.partial_cmp(&max), Some(std::cmp::Ordering::Less | std::cmp::Ordering::Equal)) {
            return Err(Error::InvalidArgument {
                op: "clamp",
                reason: format!("needs min <= max, got min = {min:?} and max = {max:?}"),
            });
        }
        self.param(ParamOp::Clamp(min.to_scalar(), max.to_scalar()))
    }

    fn param(&self, op: ParamOp) -> Result<Self> {
        let buf = self.queued("an elementwise op")?.unary_param(op, T::DTYPE, self.numel())?;
        let out = self.with_buffer(buf, self.shape.clone());
        let name = match op {
            ParamOp::Pow(_) => "pow",
            ParamOp::Clamp(..) => "clamp",
        };
        Ok(self.track1(out, name, |_| {
            let x = self.saved();
            {
                move |g: Tensor<_, _>| match op {
                    // d(x^e)/dx = e x^(e-1)
                    ParamOp::Pow(e) => {
                        let e = T::from_scalar(e);
                        let e1 = T::from_f64(e.to_f64() - 1.0);
                        g.times(&x.param(ParamOp::Pow(e1.to_scalar()))?)?.binary_scalar(BinaryOp::Mul, e)
                    }
                    // 1 inside [min, max], as PyTorch's
                    ParamOp::Clamp(lo, hi) => {
                        g.masked(&x.ge_scalar(T::from_scalar(lo))?)?.masked(&x.le_scalar(T::from_scalar(hi))?)
                    }
                }
            }
        }))
    }
}

impl<D: Device, T: Float> Tensor<D, T> {
    /// `x^exponent` elementwise (float types only: for integers, convert first).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let t = Tensor::<Cuda<0>, f64>::from_vec(vec![4.0, 9.0], [2])?;
    /// assert_eq!(t.pow(0.5)?.to_vec()?, vec![2.0, 3.0]);
    /// assert_eq!(t.pow(2.0)?.to_vec()?, vec![16.0, 81.0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn pow(&self, exponent: T) -> Result<Self> {
        self.param(ParamOp::Pow(exponent.to_scalar()))
    }

    /// `e^x` elementwise.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// assert_eq!(Tensor::<Cpu>::zeros([1])?.exp()?.to_vec()?, vec![1.0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn exp(&self) -> Result<Self> {
        self.unary(UnaryOp::Exp)
    }

    /// The square root elementwise (NaN for negative values).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// assert_eq!(Tensor::<Cpu>::full([1], 9.0)?.sqrt()?.to_vec()?, vec![3.0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn sqrt(&self) -> Result<Self> {
        self.unary(UnaryOp::Sqrt)
    }

    /// The sine elementwise, of radians (NaN for an infinity). The 16-bit types are
    /// computed in f32 and rounded once, as every float op.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu, f64>::from_vec(vec![0.0, std::f64::consts::FRAC_PI_2, f64::INFINITY], [3])?;
    /// let s = t.sin()?.to_vec()?;
    /// assert_eq!(&s[..2], &[0.0, 1.0]);
    /// assert!(s[2].is_nan());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn sin(&self) -> Result<Self> {
        self.unary(UnaryOp::Sin)
    }

    /// The cosine elementwise, of radians (NaN for an infinity).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu>::from_vec(vec![0.0, std::f32::consts::PI], [2])?;
    /// assert_eq!(t.cos()?.to_vec()?, vec![1.0, -1.0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn cos(&self) -> Result<Self> {
        self.unary(UnaryOp::Cos)
    }
}

/// `scalar op tensor` for one operator, every element type, both operand forms; the
/// doc (with its example) goes on the first type's impl only.
macro_rules! scalar_lhs_op {
    ($Trait:ident, $method:ident, $op:expr, $doc:literal, $first:ty $(, $t:ty)*) => {
        #[doc = $doc]
        impl<D: Device> $Trait<&Tensor<D, $first>> for $first {
            type Output = Result<Tensor<D, $first>>;
            fn $method(self, rhs: &Tensor<D, $first>) -> Self::Output {
                rhs.scalar_lhs($op, self)
            }
        }
        scalar_lhs_op!(@owned $Trait, $method, $op, $first);
        $(
            impl<D: Device> $Trait<&Tensor<D, $t>> for $t {
                type Output = Result<Tensor<D, $t>>;
                fn $method(self, rhs: &Tensor<D, $t>) -> Self::Output {
                    rhs.scalar_lhs($op, self)
                }
            }
            scalar_lhs_op!(@owned $Trait, $method, $op, $t);
        )*
    };
    (@owned $Trait:ident, $method:ident, $op:expr, $t:ty) => {
        impl<D: Device> $Trait<Tensor<D, $t>> for $t {
            type Output = Result<Tensor<D, $t>>;
            fn $method(self, rhs: Tensor<D, $t>) -> Self::Output {
                rhs.scalar_lhs($op, self)
            }
        }
    };
}

scalar_lhs_op!(
    Add,
    add,
    BinaryOp::Add,
    "`s + x` elementwise, for every element type.

```
# extern crate locus_runtime as locus;
use locus::{Cuda, Tensor};
let x = Tensor::<Cuda<0>, u8>::from_vec(vec![1, 255], [2])?;
assert_eq!((1 + &x)?.to_vec()?, vec![2, 0]); // integers wrap
# Ok::<(), locus::Error>(())
```",
    f32,
    f64,
    i32,
    i64,
    u8,
    half::bf16,
    half::f16
);
scalar_lhs_op!(
    Sub,
    sub,
    BinaryOp::Sub,
    "`s - x` elementwise, for every element type.

```
# extern crate locus_runtime as locus;
use locus::{Cpu, Tensor};
let x = Tensor::<Cpu>::from_vec(vec![0.25, 2.0], [2])?;
assert_eq!((1.0 - &x)?.to_vec()?, vec![0.75, -1.0]);
# Ok::<(), locus::Error>(())
```",
    f32,
    f64,
    i32,
    i64,
    u8,
    half::bf16,
    half::f16
);
scalar_lhs_op!(
    Mul,
    mul,
    BinaryOp::Mul,
    "`s * x` elementwise, for every element type.

```
# extern crate locus_runtime as locus;
use locus::{Cuda, Tensor};
let x = Tensor::<Cuda<0>>::from_vec(vec![1.0, -2.0], [2])?;
assert_eq!((2.0 * x)?.to_vec()?, vec![2.0, -4.0]);
# Ok::<(), locus::Error>(())
```",
    f32,
    f64,
    i32,
    i64,
    u8,
    half::bf16,
    half::f16
);
scalar_lhs_op!(
    Div,
    div,
    BinaryOp::Div,
    "`s / x` elementwise, for every element type; integer division by zero is an error.

```
# extern crate locus_runtime as locus;
use locus::{Cpu, Tensor};
let x = Tensor::<Cpu, i32>::from_vec(vec![2, -3], [2])?;
assert_eq!((12 / &x)?.to_vec()?, vec![6, -4]);
let z = Tensor::<Cpu, i32>::zeros([1])?;
assert!((1 / &z).is_err());
# Ok::<(), locus::Error>(())
```",
    f32,
    f64,
    i32,
    i64,
    u8,
    half::bf16,
    half::f16
);
