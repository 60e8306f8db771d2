//! The f64 math behind the host backend's activations (`log`, `tanh`, `sigmoid`, `gelu`,
//! `gelu_tanh`), for every float element type: a kernel converts each element to f64,
//! computes here and rounds once, so an f32 result is the correctly rounded value or one
//! ulp from it, and the GPU's f32 functions (`erff`, `tanhf`, ...) are checked against it.
//!
//! Rust's `f64::erf` is not stable, so [`erf`] is computed here: a series of positive
//! terms below 2 and a continued fraction above, both times `e^{-x²}` with `x²` split
//! exactly. Against CPython's `math.erf` (the C library's) it is within 16 ulp on
//! `[0, 6.5]`; every f64 at or above 6 has `erf = 1` (`erfc(6) < 2⁻⁵⁴`).

use std::f64::consts::{FRAC_1_SQRT_2, FRAC_2_SQRT_PI, PI};

/// `e^{-a²}` with `a²` taken as an exact sum `hi + lo` (Dekker's split), so that the
/// rounding of `a²` (relative 2⁻⁵³, which `e^{-a²}` would multiply by `a²`) is not lost.
fn exp_neg_square(a: f64) -> f64 {
    let hi = a * a;
    let c = 134_217_729.0 * a; // 2^27 + 1
    let ah = c - (c - a);
    let al = a - ah;
    let lo = ((ah * ah - hi) + 2.0 * ah * al) + al * al;
    (-hi).exp() * (1.0 - lo)
}

/// `erf(a)` for `0 <= a < 2`: `2/√π e^{-a²} Σ 2ⁿ a^{2n+1} / (1·3·…·(2n+1))`, whose terms
/// are all positive (no cancellation); at most 85 of them below 2.
fn erf_series(a: f64) -> f64 {
    let a2 = a * a;
    let (mut term, mut sum, mut n) = (a, a, 0.0);
    while term > sum * 1e-17 {
        n += 1.0;
        term *= 2.0 * a2 / (2.0 * n + 1.0);
        sum += term;
    }
    FRAC_2_SQRT_PI * exp_neg_square(a) * sum
}

/// `erfc(a)` for `a >= 2`: `e^{-a²} / (√π K)` with the continued fraction
/// `K = a + (1/2)/(a + 1/(a + (3/2)/(a + …)))`, by the modified Lentz method (about 60
/// steps at 2, fewer above).
fn erfc_fraction(a: f64) -> f64 {
    let (mut f, mut c, mut d) = (a, a, 0.0);
    for n in 1..1000 {
        let an = f64::from(n) / 2.0;
        d = 1.0 / (a + an * d);
        c = a + an / c;
        let delta = c * d;
        f *= delta;
        if (delta - 1.0).abs() < 1e-16 {
            break;
        }
    }
    exp_neg_square(a) / (PI.sqrt() * f)
}

/// The error function. NaN stays NaN, `erf(-0.0)` is -0.0, `erf(±∞)` is ±1.
pub(in crate::backend) fn erf(x: f64) -> f64 {
    let a = x.abs();
    let r = if x.is_nan() {
        return x;
    } else if a < 2.0 {
        erf_series(a)
    } else if a < 6.0 {
        1.0 - erfc_fraction(a)
    } else {
        1.0
    };
    r.copysign(x)
}

/// `1 / (1 + e^{-x})` without overflow: for negative `x` as `e^x / (1 + e^x)`, so that
/// `e^{-x}` is never taken of a large positive number. NaN stays NaN.
pub(in crate::backend) fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// `0.5 x (1 + erf(x / √2))`, the exact GELU.
pub(in crate::backend) fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + erf(x * FRAC_1_SQRT_2))
}

/// The derivative of [`gelu`]: `Φ(x) + x φ(x)`.
pub(in crate::backend) fn gelu_grad(x: f64) -> f64 {
    let pdf = (-0.5 * x * x).exp() * (0.5 * FRAC_2_SQRT_PI * FRAC_1_SQRT_2); // 1/√(2π)
    0.5 * (1.0 + erf(x * FRAC_1_SQRT_2)) + x * pdf
}

/// The derivative of [`gelu_tanh`]: `½(1 + t) + ½x(1 − t²)·√(2/π)(1 + 3·0.044715x²)`, `t`
/// the tanh of its argument.
pub(in crate::backend) fn gelu_tanh_grad(x: f64) -> f64 {
    let beta = FRAC_2_SQRT_PI * FRAC_1_SQRT_2;
    let t = (beta * (x + 0.044715 * (x * x * x))).tanh();
    0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * beta * (1.0 + 3.0 * 0.044715 * x * x)
}

/// `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))`, PyTorch's `approximate='tanh'`.
pub(in crate::backend) fn gelu_tanh(x: f64) -> f64 {
    let beta = FRAC_2_SQRT_PI * FRAC_1_SQRT_2; // √(2/π)
    0.5 * x * (1.0 + (beta * (x + 0.044715 * (x * x * x))).tanh())
}

#[cfg(test)]
mod tests {
    use crate::backend::host::kernels::math::*;

    /// Ulps between two finite f64 of one sign.
    fn ulps(a: f64, b: f64) -> u64 {
        a.to_bits().abs_diff(b.to_bits())
    }

    #[test]
    fn erf_matches_the_c_library_within_sixteen_ulp() {
        // (x, erf(x)) from CPython's math.erf, which calls the C library's erf.
        let table = [
            (1e-10, 1.1283791670955126e-10),
            (0.1, 0.1124629160182849),
            (0.5, 0.5204998778130465),
            (1.0, 0.8427007929497149),
            (1.5, 0.9661051464753108),
            (2.0, 0.9953222650189527),
            (2.5, 0.999593047982555),
            (2.9, 0.9999589021219005),
            (3.0, 0.9999779095030014),
            (3.1, 0.9999883513426328),
            (4.0, 0.9999999845827421),
            (5.0, 0.9999999999984626),
            (5.9, 0.9999999999999999),
            (6.1, 1.0),
        ];
        for (x, want) in table {
            assert!(ulps(erf(x), want) <= 16, "erf({x}) = {} vs {want}", erf(x));
            assert_eq!(erf(-x), -erf(x), "erf is odd at {x}");
        }
        // erfc's tail, where 1 - erf loses everything: erfc(5) from math.erfc.
        let tail = erfc_fraction(5.0);
        assert!((tail - 1.5374597944280351e-12).abs() < 1e-26, "{tail}");
    }

    #[test]
    fn erf_special_values() {
        assert!(erf(f64::NAN).is_nan());
        assert_eq!(erf(f64::INFINITY), 1.0);
        assert_eq!(erf(f64::NEG_INFINITY), -1.0);
        assert!(erf(-0.0).is_sign_negative() && erf(-0.0) == 0.0);
        assert_eq!(erf(1e-300), 1e-300 * FRAC_2_SQRT_PI);
    }

    #[test]
    fn sigmoid_is_stable_at_both_ends() {
        assert_eq!(sigmoid(100.0), 1.0);
        let low = sigmoid(-100.0);
        assert!(low > 0.0 && (low - (-100f64).exp()).abs() < 1e-57, "{low}");
        assert_eq!(sigmoid(f64::INFINITY), 1.0);
        assert_eq!(sigmoid(f64::NEG_INFINITY), 0.0);
        assert_eq!(sigmoid(0.0), 0.5);
        assert!(sigmoid(f64::NAN).is_nan());
    }

    #[test]
    fn gelu_values() {
        // torch.nn.functional.gelu(torch.tensor([1.0, -1.0], dtype=torch.float64)), and
        // with approximate='tanh'.
        assert!((gelu(1.0) - 0.8413447460685429).abs() < 1e-15);
        assert!((gelu(-1.0) + 0.15865525393145707).abs() < 1e-15);
        assert!((gelu_tanh(1.0) - 0.8411919906082768).abs() < 1e-15);
        assert!((gelu_tanh(-1.0) + 0.15880800939172324).abs() < 1e-15);
        assert_eq!(gelu(0.0), 0.0);
        assert_eq!(gelu(f64::INFINITY), f64::INFINITY);
        assert!(gelu(f64::NAN).is_nan() && gelu_tanh(f64::NAN).is_nan());
    }
}
