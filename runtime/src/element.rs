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
    /// `i64`, CUDA `long long`: PyTorch's index type (class targets, `num_batches_tracked`).
    I64,
    /// `u8`, CUDA `unsigned char`.
    U8,
    /// [`bf16`](half::bf16), bfloat16: 8 exponent and 7 mantissa bits, stored as 16 bits
    /// and computed in f32 on both backends (the kernels' `bf16`).
    BF16,
    /// [`f16`](half::f16), IEEE half precision, stored as 16 bits and computed in f32 on
    /// both backends (the kernels' `f16`).
    F16,
}

impl DType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F64 | DType::I64 => 8,
            DType::U8 => 1,
            DType::BF16 | DType::F16 => 2,
        }
    }

    /// The CUDA C name of this type, as the kernels spell it.
    pub const fn c_name(self) -> &'static str {
        match self {
            DType::F32 => "float",
            DType::F64 => "double",
            DType::I32 => "int",
            DType::I64 => "long long",
            DType::U8 => "unsigned char",
            DType::BF16 => "bf16",
            DType::F16 => "f16",
        }
    }

    /// True for `f32`, `f64`, `bf16` and `f16`.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::BF16 | DType::F16)
    }

    /// True for `bf16` and `f16`, the types stored in 16 bits and computed in f32.
    pub const fn is_half(self) -> bool {
        matches!(self, DType::BF16 | DType::F16)
    }
}

impl DType {
    /// The Rust name of this type (`"f32"`, `"bf16"`), as the kernels' names spell it.
    pub const fn name(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::BF16 => "bf16",
            DType::F16 => "f16",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
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
    /// An `i64` value.
    I64(i64),
    /// A `u8` value.
    U8(u8),
    /// A `bf16` value.
    BF16(half::bf16),
    /// An `f16` value.
    F16(half::f16),
}

mod sealed {
    pub trait Sealed {}
}

/// An element type: `f32`, `f64`, `i32`, `i64`, `u8`, [`bf16`](half::bf16) or
/// [`f16`](half::f16).
///
/// Integer arithmetic wraps on overflow (as in PyTorch and CUDA); integer division by
/// zero is an error. `bf16` and `f16` arithmetic is done in f32 and rounded to the
/// nearest 16-bit value (ties to even) after every op, on both backends, as PyTorch's
/// CUDA kernels do.
pub trait Element:
    Copy
    + Send
    + Sync
    + Default
    + PartialEq
    + PartialOrd
    + fmt::Debug
    + bytemuck::Pod
    + sealed::Sealed
    + SameElement<Self>
    + 'static
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
    /// The larger of the two; NaN wins, as in `torch.max`, and +0.0 is above -0.0 (IEEE
    /// 754-2019 `maximum`), so a reduction gives the same bits in any order.
    #[doc(hidden)]
    fn max_of(self, o: Self) -> Self;
}

/// A floating-point element type: `f32`, `f64`, `bf16` or `f16`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is no float element type",
    label = "this needs `f32`, `f64`, `bf16` or `f16`",
    note = "gradients, parameters and the float-only ops exist for float tensors: convert first with `.to_dtype::<f32>()`"
)]
pub trait Float: Element {
    #[doc(hidden)]
    fn exp(self) -> Self;
    #[doc(hidden)]
    fn sqrt(self) -> Self;
    /// A uniform value in `[0, 1)` from 64 random bits.
    #[doc(hidden)]
    fn from_bits_uniform(bits: u64) -> Self;
}

/// An element type that indices may have: `i32` or `i64` (PyTorch's index type, so class
/// targets and index lists read from a PyTorch checkpoint work as they are).
/// [`index_select`](crate::Tensor::index_select),
/// [`cross_entropy`](crate::Tensor::cross_entropy) and
/// [`one_hot`](crate::Tensor::one_hot) take either. The backends read `i32` indices: `i64`
/// ones are converted first, after their smallest and largest are read back, so an index
/// that does not fit an `i32` is an `Err` naming it, never a wrapped value.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Cpu, Tensor};
/// let table = Tensor::<Cpu>::from_vec(vec![0.0, 1.0, 2.0], [3])?;
/// let picked = table.index_select(0, &Tensor::<Cpu, i64>::from_vec(vec![2, 0], [2])?)?;
/// assert_eq!(picked.to_vec()?, vec![2.0, 0.0]);
/// let far = Tensor::<Cpu, i64>::from_vec(vec![1, 1 << 40], [2])?;
/// let e = table.index_select(0, &far).unwrap_err();
/// assert!(e.to_string().contains("index 1099511627776 (at position 1) is out of range"));
/// # Ok::<(), locus::Error>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is no index element type",
    label = "indices are `i32` or `i64`",
    note = "convert the indices first, e.g. `.to_dtype::<i64>()`"
)]
pub trait IndexElement: Element + index_sealed::Sealed {
    /// `self as i64` (exact).
    #[doc(hidden)]
    fn to_i64(self) -> i64;
}

mod index_sealed {
    pub trait Sealed {}
    impl Sealed for i32 {}
    impl Sealed for i64 {}
}

impl IndexElement for i32 {
    fn to_i64(self) -> i64 {
        self.into()
    }
}
impl IndexElement for i64 {
    fn to_i64(self) -> i64 {
        self
    }
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
                if self.is_nan() || self > o || (self == o && o.is_sign_negative()) {
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

/// `d` as an f32 rounded toward zero, with the lowest bit set when that lost anything
/// ("round to odd"). Rounding the result once more, to nearest, into a type of at most 22
/// bits of precision gives `d` correctly rounded: no double-rounding error. (`half`'s own
/// `from_f64` drops the low 32 bits of the f64 first, so `1 + 2^-8 + 2^-40` would become
/// the bf16 tie `1 + 2^-8` and round to 1.0.) The kernels do the same.
pub(crate) fn f64_to_f32_odd(d: f64) -> f32 {
    let f = d as f32;
    if d.is_nan() || f as f64 == d {
        return f;
    }
    // Rounded away from zero: one step back (|f| > |d| >= 0, so f is not zero).
    let f = if (f as f64).abs() > d.abs() { f32::from_bits(f.to_bits() - 1) } else { f };
    f32::from_bits(f.to_bits() | 1)
}

/// `v` as an f32 rounded toward zero, with the lowest bit set when that lost anything, as
/// [`f64_to_f32_odd`] does for an f64: an i64 has up to 63 significant bits, so going
/// through an f64 rounded to nearest could round twice (`2^62 + 2^54 + 1` would become the
/// bf16 tie `2^62 + 2^54` and round down). The kernels' `i64_to_f32_odd` is the same.
pub(crate) fn i64_to_f32_odd(v: i64) -> f32 {
    let f = v as f32;
    // Exact in i128: every f32 below 2^64 in magnitude is an integer there.
    if f as i128 == v as i128 {
        return f;
    }
    // Rounded away from zero: one step back (|f| > |v| > 0, so f is not zero).
    let f = if (f as i128).abs() > (v as i128).abs() { f32::from_bits(f.to_bits() - 1) } else { f };
    f32::from_bits(f.to_bits() | 1)
}

/// `bf16` and `f16`: each op converts to f32 (exact), computes there, and rounds back
/// once (to nearest, ties to even), as the kernels do.
macro_rules! half_element {
    ($t:ident, $d:ident, $mant:expr) => {
        impl sealed::Sealed for half::$t {}
        impl Element for half::$t {
            const DTYPE: DType = DType::$d;
            const ZERO: Self = half::$t::ZERO;
            const ONE: Self = half::$t::ONE;
            fn to_scalar(self) -> Scalar {
                Scalar::$d(self)
            }
            fn from_scalar(s: Scalar) -> Self {
                match s {
                    Scalar::F32(v) => half::$t::from_f32(v),
                    Scalar::F64(v) => half::$t::from_f32(f64_to_f32_odd(v)),
                    Scalar::I32(v) => half::$t::from_f32(f64_to_f32_odd(v as f64)),
                    Scalar::I64(v) => half::$t::from_f32(i64_to_f32_odd(v)),
                    Scalar::U8(v) => half::$t::from_f32(v as f32),
                    Scalar::BF16(v) => half::$t::from_f32(v.to_f32()),
                    Scalar::F16(v) => half::$t::from_f32(v.to_f32()),
                }
            }
            fn to_f64(self) -> f64 {
                half::$t::to_f64(self)
            }
            fn from_f64(v: f64) -> Self {
                half::$t::from_f32(f64_to_f32_odd(v))
            }
            fn add(self, o: Self) -> Self {
                half::$t::from_f32(self.to_f32() + o.to_f32())
            }
            fn sub(self, o: Self) -> Self {
                half::$t::from_f32(self.to_f32() - o.to_f32())
            }
            fn mul(self, o: Self) -> Self {
                half::$t::from_f32(self.to_f32() * o.to_f32())
            }
            fn div(self, o: Self) -> Option<Self> {
                Some(half::$t::from_f32(self.to_f32() / o.to_f32()))
            }
            fn neg(self) -> Self {
                -self
            }
            fn max_of(self, o: Self) -> Self {
                if self.is_nan() || self > o || (self == o && o.is_sign_negative()) {
                    self
                } else {
                    o
                }
            }
        }
        impl Float for half::$t {
            fn exp(self) -> Self {
                half::$t::from_f32(self.to_f32().exp())
            }
            fn sqrt(self) -> Self {
                half::$t::from_f32(self.to_f32().sqrt())
            }
            fn from_bits_uniform(bits: u64) -> Self {
                // The top mantissa-width bits, scaled into [0, 1): exact and never 1.0.
                half::$t::from_f32((bits >> (64 - $mant)) as f32 * (1.0 / (1u64 << $mant) as f32))
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
            Scalar::I64(v) => v as $t,
            Scalar::U8(v) => v as $t,
            Scalar::BF16(v) => v.to_f32() as $t,
            Scalar::F16(v) => v.to_f32() as $t,
        }
    };
}

float_element!(f32, F32, 24);
float_element!(f64, F64, 53);
int_element!(i32, I32);
int_element!(i64, I64);
int_element!(u8, U8);
half_element!(bf16, BF16, 8);
half_element!(f16, F16, 11);

/// `Self` and `Rhs` may be the element types of the two operands of one op: they are the
/// same type. locus has no implicit type promotion (PyTorch promotes `f32 + bf16` to
/// f32): a mixed op does not compile, and the message says how to convert one side.
///
/// ```text
/// use locus::{bf16, Cpu, Tensor};
/// let a = Tensor::<Cpu>::zeros([2]).unwrap();
/// let b = Tensor::<Cpu, bf16>::zeros([2]).unwrap();
/// let _ = &a + &b; // tensors of `f32` and `bf16` cannot be used in one op
/// ```
#[diagnostic::on_unimplemented(
    message = "tensors of `{Self}` and `{Rhs}` cannot be used in one op",
    label = "this operand holds `{Rhs}`, the other `{Self}`",
    note = "locus never converts element types implicitly: convert one side first, e.g. `.to_dtype::<{Self}>()` (or `.to_dtype::<{Rhs}>()` on the other)"
)]
pub trait SameElement<Rhs> {}

/// Never a real element type: a second impl of [`SameElement`] for each type, so that
/// rustc cannot infer the other operand's type from a single impl (which would turn the
/// error into a bare type mismatch and lose the message).
#[doc(hidden)]
pub enum Untyped {}

macro_rules! same_element {
    ($($t:ty),*) => {$(
        #[diagnostic::do_not_recommend]
        impl SameElement<$t> for $t {}
        #[diagnostic::do_not_recommend]
        impl SameElement<Untyped> for $t {}
    )*};
}
same_element!(f32, f64, i32, i64, u8, half::bf16, half::f16);

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
            $crate::element::DType::I64 => {
                type $t = i64;
                $body
            }
            $crate::element::DType::U8 => {
                type $t = u8;
                $body
            }
            $crate::element::DType::BF16 => {
                type $t = half::bf16;
                $body
            }
            $crate::element::DType::F16 => {
                type $t = half::f16;
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
        assert_eq!(Element::neg(i64::MIN), i64::MIN);
        assert_eq!(Element::add(i64::MAX, 1), i64::MIN);
        assert_eq!(Element::div(9i64, 0), None);
        assert_eq!(Element::div(i64::MIN, -1), Some(i64::MIN));
    }

    #[test]
    fn i64_to_a_16_bit_type_rounds_once() {
        // Just above the bf16 tie between 2^62 and 2^62 + 2^55: rounds up.
        let v = (1i64 << 62) + (1 << 54) + 1;
        assert_eq!(half::bf16::from_scalar(Scalar::I64(v)).to_f64(), ((1u64 << 62) + (1 << 55)) as f64);
        // Through an f64 rounded to nearest it would be the tie, which rounds down to even.
        assert_eq!(half::bf16::from_f64(v as f64).to_f64(), (1u64 << 62) as f64);
        for v in [0, 1, -1, 255, -(1 << 24) - 1, i64::MIN, i64::MAX, i64::MIN + 1] {
            // Exact, or odd and within one step of `v` either way.
            let f = i64_to_f32_odd(v);
            if f as i128 == v as i128 {
                continue;
            }
            let (below, above) = (f32::from_bits(f.to_bits() - 1), f32::from_bits(f.to_bits() + 1));
            let (lo, hi) = if v < 0 { (above, below) } else { (below, above) };
            assert!(f.to_bits() & 1 == 1 && (lo as i128) < v as i128 && (v as i128) < hi as i128, "{v}");
        }
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

    #[test]
    fn float_max_puts_positive_zero_above_negative_zero() {
        for (a, b) in [(-0.0f64, 0.0), (0.0, -0.0)] {
            assert!(a.max_of(b).is_sign_positive(), "max({a}, {b})");
            assert!((a as f32).max_of(b as f32).is_sign_positive());
            assert!(half::bf16::from_f64(a).max_of(half::bf16::from_f64(b)).is_sign_positive());
            assert!(half::f16::from_f64(a).max_of(half::f16::from_f64(b)).is_sign_positive());
        }
        assert!((-0.0f64).max_of(-0.0).is_sign_negative());
    }
}
