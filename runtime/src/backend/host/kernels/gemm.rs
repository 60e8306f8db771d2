//! The host backend's matrix products ([`Gemm`]): a batch is one product after another
//! through the single-product GEMMs below (`matrixmultiply` for floats, the split loop
//! for integers), a rhs shared by the batch is one tall product, and the reduced f32
//! precisions are modelled as the GPU computes them: every input rounded to TF32 (`High`)
//! or bf16 (`Medium`), to nearest with ties to even, then multiplied and accumulated in
//! f32. bf16 and f16 products are f32 products of the widened inputs, each result rounded
//! once.

use std::borrow::Cow;

use crate::backend::host::kernels::GRAIN;
use crate::backend::workers::split_mut;
use crate::backend::{Gemm, MatmulPrecision};
use crate::element::Element;
use crate::error::{Error, Result};

/// `x` rounded to TF32: 10 explicit mantissa bits (f32's 8 exponent bits), to nearest,
/// ties to even. Infinities stay; NaN stays NaN.
pub(in crate::backend) fn round_tf32(x: f32) -> f32 {
    round_mantissa(x, 13)
}

/// `x` rounded to bf16's 7 explicit mantissa bits, to nearest, ties to even, kept as f32.
pub(in crate::backend) fn round_bf16(x: f32) -> f32 {
    round_mantissa(x, 16)
}

/// `x` with its `drop` low mantissa bits rounded away (to nearest, ties to even). A carry
/// out of the mantissa moves the exponent up, which is the rounding wanted (the largest
/// finite values round to infinity, as a conversion to the narrower type does).
fn round_mantissa(x: f32, drop: u32) -> f32 {
    if x.is_nan() {
        return x;
    }
    let bits = x.to_bits();
    let half = (1u32 << (drop - 1)) - 1;
    let even = (bits >> drop) & 1;
    f32::from_bits(bits.wrapping_add(half + even) & !((1u32 << drop) - 1))
}

/// `x`, or a copy of it with every value rounded as `precision` says.
fn rounded(x: &[f32], precision: MatmulPrecision) -> Result<Cow<'_, [f32]>> {
    let round: fn(f32) -> f32 = match precision {
        MatmulPrecision::Highest => return Ok(Cow::Borrowed(x)),
        MatmulPrecision::High => round_tf32,
        MatmulPrecision::Medium => round_bf16,
    };
    let mut out = vec![0.0f32; x.len()];
    split_mut(&mut out, 1, GRAIN, &|start, o| {
        for (o, &v) in o.iter_mut().zip(&x[start..]) {
            *o = round(v);
        }
        Ok(())
    })?;
    Ok(Cow::Owned(out))
}

/// One `[m, k] x [k, n]` product of a host GEMM; the flags say an operand is stored
/// transposed (`Gemm::ta`, `Gemm::tb`).
type Single<T> = fn(&[T], &[T], &mut [T], usize, usize, usize, (bool, bool)) -> Result<()>;

/// The products of `g`, each by `single`.
fn batched<T: Element>(a: &[T], b: &[T], out: &mut [T], g: Gemm, single: Single<T>) -> Result<()> {
    let g = g.folded();
    let Gemm { batch, m, k, n, rhs_stride, .. } = g;
    let fits = g.lens().is_some_and(|(la, lb, lo)| a.len() >= la && b.len() >= lb && out.len() == lo);
    if !fits {
        return Err(Error::InvalidArgument {
            op: "matmul",
            reason: format!(
                "operands of {} and {} elements for {batch} products of [{m}, {k}] x [{k}, {n}]",
                a.len(),
                b.len()
            ),
        });
    }
    if out.is_empty() {
        return Ok(());
    }
    // Every length below is at most an operand's (checked above).
    let (sa, so, sb) = (m * k, m * n, k * n);
    for (i, o) in out.chunks_mut(so).enumerate() {
        single(&a[i * sa..(i + 1) * sa], &b[i * rhs_stride..i * rhs_stride + sb], o, m, k, n, (g.ta, g.tb))?;
    }
    Ok(())
}

/// `out = a · b` for f32 at the precision `g` asks for.
pub(in crate::backend) fn matmul_f32(a: &[f32], b: &[f32], out: &mut [f32], g: Gemm) -> Result<()> {
    let (a, b) = (rounded(a, g.precision)?, rounded(b, g.precision)?);
    batched(&a, &b, out, g, sgemm)
}

/// `out = a · b` for a 16-bit float type: the inputs widened to f32 (exactly), one f32
/// product, each result rounded once to the type (to nearest, ties to even), as cuBLAS
/// computes it with f32 accumulation.
pub(in crate::backend) fn matmul_half<T: Element>(a: &[T], b: &[T], out: &mut [T], g: Gemm) -> Result<()> {
    let widen = |x: &[T]| -> Result<Vec<f32>> {
        let mut w = vec![0.0f32; x.len()];
        split_mut(&mut w, 1, GRAIN, &|start, o| {
            for (o, &v) in o.iter_mut().zip(&x[start..]) {
                // Every 16-bit float value is an f32 value.
                *o = v.to_f64() as f32;
            }
            Ok(())
        })?;
        Ok(w)
    };
    let (wa, wb) = (widen(a)?, widen(b)?);
    let mut wide = vec![0.0f32; out.len()];
    batched(&wa, &wb, &mut wide, g, sgemm)?;
    split_mut(out, 1, GRAIN, &|start, o| {
        for (o, &v) in o.iter_mut().zip(&wide[start..]) {
            // Exact as an f64, so this is the one rounding of `v` to the type.
            *o = T::from_f64(v as f64);
        }
        Ok(())
    })
}

/// `out = a · b` for f64.
pub(in crate::backend) fn matmul_f64(a: &[f64], b: &[f64], out: &mut [f64], g: Gemm) -> Result<()> {
    batched(a, b, out, g, dgemm)
}

/// `out = a · b` for an integer type (wrapping).
pub(in crate::backend) fn matmul_int<T: Element>(a: &[T], b: &[T], out: &mut [T], g: Gemm) -> Result<()> {
    g.check_integer(T::DTYPE)?;
    batched(a, b, out, g, int_gemm::<T>)
}

/// The sizes of a matmul, checked against its operands.
fn gemm_sizes<T>(a: &[T], b: &[T], out: &[T], m: usize, k: usize, n: usize) -> Result<()> {
    let fits = |x: &[T], r: usize, c: usize| r.checked_mul(c).is_some_and(|len| x.len() >= len);
    if fits(a, m, k) && fits(b, k, n) && m.checked_mul(n) == Some(out.len()) {
        return Ok(());
    }
    Err(Error::InvalidArgument {
        op: "matmul",
        reason: format!("operands of {} and {} elements for [{m}, {k}] x [{k}, {n}]", a.len(), b.len()),
    })
}

/// The (row, column) strides of the operands: row-major `[m, k]` and `[k, n]`, or read
/// from their transposes `[k, m]` and `[n, k]`. Every size fits `isize`: each is at most
/// the length of a slice of them.
fn strides(m: usize, k: usize, n: usize, (ta, tb): (bool, bool)) -> ((isize, isize), (isize, isize)) {
    let a = if ta { (1, m as isize) } else { (k as isize, 1) };
    let b = if tb { (1, k as isize) } else { (n as isize, 1) };
    (a, b)
}

/// `out = a · b` for `[m, k]` and `[k, n]` f32 matrices (row-major, or stored transposed
/// as `t` says), by `matrixmultiply`.
fn sgemm(a: &[f32], b: &[f32], out: &mut [f32], m: usize, k: usize, n: usize, t: (bool, bool)) -> Result<()> {
    gemm_sizes(a, b, out, m, k, n)?;
    if out.is_empty() || k == 0 {
        out.fill(0.0);
        return Ok(());
    }
    let ((rsa, csa), (rsb, csb)) = strides(m, k, n, t);
    // SAFETY: `a` holds `m * k`, `b` `k * n` and `out` `m * n` elements (checked above),
    // and the strides address each within them (row-major, or its transpose); `out` is
    // not read (beta is 0) and is not aliased.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr(),
            rsa,
            csa,
            b.as_ptr(),
            rsb,
            csb,
            0.0,
            out.as_mut_ptr(),
            n as isize,
            1,
        )
    };
    Ok(())
}

/// `out = a · b` for f64 matrices, as `sgemm`.
fn dgemm(a: &[f64], b: &[f64], out: &mut [f64], m: usize, k: usize, n: usize, t: (bool, bool)) -> Result<()> {
    gemm_sizes(a, b, out, m, k, n)?;
    if out.is_empty() || k == 0 {
        out.fill(0.0);
        return Ok(());
    }
    let ((rsa, csa), (rsb, csb)) = strides(m, k, n, t);
    // SAFETY: as in `sgemm`.
    unsafe {
        matrixmultiply::dgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr(),
            rsa,
            csa,
            b.as_ptr(),
            rsb,
            csb,
            0.0,
            out.as_mut_ptr(),
            n as isize,
            1,
        )
    };
    Ok(())
}

/// `out = a · b` as a loop (integer types, never transposed: `Gemm::check_integer`), rows
/// split over the pool.
fn int_gemm<T: Element>(a: &[T], b: &[T], out: &mut [T], m: usize, k: usize, n: usize, _: (bool, bool)) -> Result<()> {
    gemm_sizes(a, b, out, m, k, n)?;
    if out.is_empty() {
        return Ok(());
    }
    let rows_per_part = (GRAIN / k.saturating_mul(n).max(1)).max(1);
    split_mut(out, n, rows_per_part, &|start, out| {
        out.fill(T::ZERO);
        for (r, row) in out.chunks_mut(n).enumerate() {
            let i = start / n + r;
            for p in 0..k {
                let av = a[i * k + p];
                for (o, &bv) in row.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                    *o = o.add(av.mul(bv));
                }
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use crate::backend::host::kernels::gemm::*;

    #[test]
    fn rounding_to_tf32_and_bf16_is_to_nearest_with_ties_to_even() {
        let ulp_tf32 = 2f32.powi(-10);
        // Below half an ulp: down; above: up; exactly half: to the even neighbour.
        assert_eq!(round_tf32(1.0 + ulp_tf32 * 0.49), 1.0);
        assert_eq!(round_tf32(1.0 + ulp_tf32 * 0.51), 1.0 + ulp_tf32);
        assert_eq!(round_tf32(1.0 + ulp_tf32 * 0.5), 1.0, "a tie goes to the even 1.0");
        assert_eq!(round_tf32(1.0 + ulp_tf32 * 1.5), 1.0 + 2.0 * ulp_tf32, "a tie goes to the even 1 + 2 ulp");
        assert_eq!(round_tf32(-(1.0 + ulp_tf32 * 0.51)), -(1.0 + ulp_tf32));
        let ulp_bf16 = 2f32.powi(-7);
        assert_eq!(round_bf16(1.0 + ulp_bf16 * 0.5), 1.0);
        assert_eq!(round_bf16(1.0 + ulp_bf16 * 0.75), 1.0 + ulp_bf16);
        assert_eq!(round_bf16(3.0), 3.0, "values that fit stay");
        // A carry into the exponent, up to infinity.
        assert_eq!(round_tf32(2.0 - 2f32.powi(-20)), 2.0);
        assert_eq!(round_bf16(f32::MAX), f32::INFINITY);
        assert_eq!(round_tf32(f32::INFINITY), f32::INFINITY);
        assert!(round_bf16(f32::NAN).is_nan());
        assert_eq!(round_tf32(-0.0).to_bits(), (-0.0f32).to_bits());
    }

    #[test]
    fn a_shared_rhs_and_a_batch_of_rhs_give_the_same_products() {
        let (batch, m, k, n) = (3, 2, 4, 5);
        let a: Vec<i32> = (0..batch * m * k).map(|i| i as i32 - 7).collect();
        let b: Vec<i32> = (0..k * n).map(|i| 3 - i as i32).collect();
        let repeated: Vec<i32> = b.iter().cycle().take(batch * k * n).copied().collect();
        let g = Gemm { batch, rhs_stride: 0, ..Gemm::single(m, k, n) };
        let (mut shared, mut each) = (vec![0; batch * m * n], vec![0; batch * m * n]);
        matmul_int(&a, &b, &mut shared, g).expect("shared rhs");
        matmul_int(&a, &repeated, &mut each, Gemm { rhs_stride: k * n, ..g }).expect("rhs per product");
        assert_eq!(shared, each);
        let mut one = vec![0; m * n];
        matmul_int(&a[m * k..2 * m * k], &b, &mut one, Gemm::single(m, k, n)).expect("one product");
        assert_eq!(one, shared[m * n..2 * m * n]);
        let short = matmul_int(&a[1..], &b, &mut shared, g);
        assert!(matches!(short, Err(Error::InvalidArgument { op: "matmul", .. })));
    }
}
