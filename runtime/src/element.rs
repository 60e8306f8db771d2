//! Element types a tensor can hold.

use std::fmt;

/// The run-time tag of an [`Element`] type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// `f32`, CUDA `float`.
    F32,
    /// `f64`, CUDA `double`.
    F64,
    /// `i32`, CUDA `int`.
    I32,
    /// `u8`, CUDA `unsigned char`.
    U8,
}

impl DType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 => 8,
            DType::U8 => 1,
        }
    }

    /// The CUDA C name of this type, as the kernels spell it.
    pub const fn c_name(self) -> &'static str {
        match self {
            DType::F32 => "float",
            DType::F64 => "double",
            DType::I32 => "int",
            DType::U8 => "unsigned char",
        }
    }

    /// True for `f32` and `f64`.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::U8 => "u8",
        })
    }
}

/// One value of any element type, for scalar operands and fills.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    /// An `f32` value.
    F32(f32),
    /// An `f64` value.
    F64(f64),
    /// An `i32` value.
    I32(i32),
    /// A `u8` value.
    U8(u8),
}

mod sealed {
    pub trait Sealed {}
}

/// An element type: `f32`, `f64`, `i32` or `u8`.
///
/// Integer arithmetic wraps on overflow (as in PyTorch and CUDA); integer division by
/// zero is an error.
pub trait Element:
    Copy + Send + Sync + Default + PartialEq + PartialOrd + fmt::Debug + bytemuck::Pod + sealed::Sealed + 'static
{
    /// The run-time tag of this type.
    const DTYPE: DType;
    /// Zero.
    const ZERO: Self;
    /// One.
    const ONE: Self;
    /// This value as a [`Scalar`].
    fn to_scalar(self) -> Scalar;
    /// The value of `s`, converted as `as` would.
    fn from_scalar(s: Scalar) -> Self;
    /// `self as f64`.
    fn to_f64(self) -> f64;
    /// `v as Self`.
    fn from_f64(v: f64) -> Self;
    #[doc(hidden)]
    fn add(self, o: Self) -> Self;
    #[doc(hidden)]
    fn sub(self, o: Self) -> Self;
    #[doc(hidden)]
    fn mul(self, o: Self) -> Self;
    /// `None` for integer division by zero.
    #[doc(hidden)]
    fn div(self, o: Self) -> Option<Self>;
    #[doc(hidden)]
    fn neg(self) -> Self;
    /// The larger of the two; NaN wins, as in `torch.max`.
    #[doc(hidden)]
    fn max_of(self, o: Self) -> Self;
}

/// A floating-point element type: `f32` or `f64`.
pub trait Float: Element {
    #[doc(hidden)]
    fn exp(self) -> Self;
    #[doc(hidden)]
    fn sqrt(self) -> Self;
    /// A uniform value in `[0, 1)` from 64 random bits.
    #[doc(hidden)]
    fn from_bits_uniform(bits: u64) -> Self;
}

macro_rules! float_element {
    ($t:ty, $d:ident, $mant:expr) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            fn to_scalar(self) -> Scalar {
                Scalar::$d(self)
            }
            fn from_scalar(s: Scalar) -> Self {
                scalar_as!(s, $t)
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn add(self, o: Self) -> Self {
                self + o
            }
            fn sub(self, o: Self) -> Self {
                self - o
            }
            fn mul(self, o: Self) -> Self {
                self * o
            }
            fn div(self, o: Self) -> Option<Self> {
                Some(self / o)
            }
            fn neg(self) -> Self {
                -self
            }
            fn max_of(self, o: Self) -> Self {
                if self.is_nan() || self >= o {
                    self
                } else {
                    o
                }
            }
        }
        impl Float for $t {
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            fn from_bits_uniform(bits: u64) -> Self {
                // The top mantissa-width bits, scaled into [0, 1): exact and never 1.0.
                (bits >> (64 - $mant)) as $t * (1.0 / (1u64 << $mant) as $t)
            }
        }
    };
}

macro_rules! int_element {
    ($t:ty, $d:ident) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            const ZERO: Self = 0;
            const ONE: Self = 1;
            fn to_scalar(self) -> Scalar {
                Scalar::$d(self)
            }
            fn from_scalar(s: Scalar) -> Self {
                scalar_as!(s, $t)
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn add(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            fn sub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            fn mul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            fn div(self, o: Self) -> Option<Self> {
                (o != 0).then(|| self.wrapping_div(o))
            }
            fn neg(self) -> Self {
                self.wrapping_neg()
            }
            fn max_of(self, o: Self) -> Self {
                Ord::max(self, o)
            }
        }
    };
}

macro_rules! scalar_as {
    ($s:expr, $t:ty) => {
        match $s {
            Scalar::F32(v) => v as $t,
            Scalar::F64(v) => v as $t,
            Scalar::I32(v) => v as $t,
            Scalar::U8(v) => v as $t,
        }
    };
}

float_element!(f32, F32, 24);
float_element!(f64, F64, 53);
int_element!(i32, I32);
int_element!(u8, U8);

/// Runs `$body` with `$t` bound to the Rust type of `$dtype`.
macro_rules! with_dtype {
    ($dtype:expr, $t:ident => $body:expr) => {
        match $dtype {
            $crate::element::DType::F32 => {
                type $t = f32;
                $body
            }
            $crate::element::DType::F64 => {
                type $t = f64;
                $body
            }
            $crate::element::DType::I32 => {
                type $t = i32;
                $body
            }
            $crate::element::DType::U8 => {
                type $t = u8;
                $body
            }
        }
    };
}
pub(crate) use with_dtype;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integer_arithmetic_wraps_and_division_by_zero_is_none() {
        assert_eq!(Element::add(250u8, 10), 4);
        assert_eq!(Element::neg(i32::MIN), i32::MIN);
        assert_eq!(Element::div(7i32, 0), None);
        assert_eq!(Element::div(i32::MIN, -1), Some(i32::MIN));
    }

    #[test]
    fn uniform_bits_stay_below_one() {
        assert!(f32::from_bits_uniform(u64::MAX) < 1.0);
        assert!(f64::from_bits_uniform(u64::MAX) < 1.0);
        assert_eq!(f32::from_bits_uniform(0), 0.0);
    }

    #[test]
    fn float_max_propagates_nan() {
        assert!(f32::NAN.max_of(1.0).is_nan());
        assert!(1.0f32.max_of(f32::NAN).is_nan());
    }
}
