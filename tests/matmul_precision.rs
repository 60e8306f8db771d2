//! Matrix products (issue 20): the f32 precision setting (process-wide, scoped per thread,
//! restored after a panic, not seen by other threads), what `High` and `Medium` compute
//! (inputs rounded to TF32 or bf16, against an f64 reference and, on the host, against
//! that rounding done by hand), batched products and a rhs shared by the batch against a
//! loop of 2-d products and a plain-Rust reference, for every element type (bf16 and f16
//! within their rounding), and the
//! errors of shapes that do not fit. Each product runs on cuda:0 of the selected backend
//! and on `Cpu` (the host kernels), which must agree.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard};

use locus::{
    bf16, f16, float32_matmul_precision, set_float32_matmul_precision, with_float32_matmul_precision, Cpu, Cuda, DType,
    Element, Error, MatmulPrecision, Tensor,
};
use proptest::prelude::*;

type G = Cuda<0>;

/// Held by every test that sets or relies on the process-wide precision: tests of one
/// binary share the process.
fn process_wide() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Values in `[-1, 1)` with their low mantissa bits in use (a TF32 or bf16 rounding
/// changes nearly all of them), from a seeded generator.
fn floats(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// `batch` products of `[m, k] x [k, n]` in f64, the rhs of product `i` at `i * rhs_stride`;
/// also `Σ|a||b|` per output element, the scale of any rounding error.
fn reference(
    a: &[f64],
    b: &[f64],
    (batch, m, k, n): (usize, usize, usize, usize),
    rhs_stride: usize,
) -> (Vec<f64>, Vec<f64>) {
    let (mut out, mut scale) = (vec![0.0; batch * m * n], vec![0.0; batch * m * n]);
    for z in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let o = z * m * n + i * n + j;
                for p in 0..k {
                    let (x, y) = (a[z * m * k + i * k + p], b[z * rhs_stride + p * n + j]);
                    out[o] += x * y;
                    scale[o] += (x * y).abs();
                }
            }
        }
    }
    (out, scale)
}

/// The same with wrapping integer arithmetic, exact.
fn reference_int<T: Element>(
    a: &[T],
    b: &[T],
    (batch, m, k, n): (usize, usize, usize, usize),
    rhs_stride: usize,
) -> Vec<T> {
    let mut out = vec![T::ZERO; batch * m * n];
    for z in 0..batch {
        for i in 0..m {
            for j in 0..n {
                let o = &mut out[z * m * n + i * n + j];
                for p in 0..k {
                    *o = o.add(a[z * m * k + i * k + p].mul(b[z * rhs_stride + p * n + j]));
                }
            }
        }
    }
    out
}

/// Every element of `got` within `rel * scale` of `want`, or within 2^-25 (half of f16's
/// least subnormal: what a product rounded to f16 may lose near zero).
fn assert_close(got: &[f64], want: &[f64], scale: &[f64], rel: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, ((g, w), s)) in got.iter().zip(want).zip(scale).enumerate() {
        let tol = rel * s + 2f64.powi(-25);
        assert!((g - w).abs() <= tol, "{what}: element {i} is {g}, want {w} (scale {s}, rel {rel})");
    }
}

fn wide<T: Element>(v: &[T]) -> Vec<f64> {
    v.iter().map(|x| x.to_f64()).collect()
}

/// Relative error bounds, times `Σ|a||b|`: f32 accumulation over `k` terms, and each
/// input's rounding (TF32 keeps 10 mantissa bits, bf16 7; twice the half-ulp of rounding
/// to nearest, which covers a truncation too).
fn bound(precision: MatmulPrecision, k: usize) -> f64 {
    let acc = (k as f64 + 2.0) * 2f64.powi(-24);
    match precision {
        MatmulPrecision::Highest => acc,
        MatmulPrecision::High => acc + 2.0 * 2f64.powi(-10),
        MatmulPrecision::Medium => acc + 2.0 * 2f64.powi(-7),
    }
}

/// `x` rounded to `bits` explicit mantissa bits, to nearest, ties to even: by the book,
/// through f64 arithmetic rather than bit tricks.
fn round_to(x: f32, bits: i32) -> f32 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    let e = (x.abs() as f64).log2().floor() as i32;
    let ulp = 2f64.powi(e - bits);
    let q = x as f64 / ulp;
    let r = q.round();
    // `round` takes ties away from zero; ties go to even instead.
    let r = if (q - q.trunc()).abs() == 0.5 && r % 2.0 != 0.0 { r - q.signum() } else { r };
    (r * ulp) as f32
}

#[test]
fn the_default_is_highest_and_a_process_wide_setting_is_seen_by_every_thread() {
    let _lock = process_wide();
    assert_eq!(float32_matmul_precision(), MatmulPrecision::Highest);
    set_float32_matmul_precision(MatmulPrecision::High);
    assert_eq!(float32_matmul_precision(), MatmulPrecision::High);
    let other = std::thread::spawn(float32_matmul_precision).join().expect("thread");
    assert_eq!(other, MatmulPrecision::High, "a process-wide setting reaches other threads");
    set_float32_matmul_precision(MatmulPrecision::Highest);
    assert_eq!(float32_matmul_precision(), MatmulPrecision::Highest);
    assert_eq!(MatmulPrecision::default(), MatmulPrecision::Highest);
    assert_eq!(MatmulPrecision::Medium.to_string(), "medium");
}

#[test]
fn a_scoped_precision_is_this_threads_alone_and_restored_after_the_closure() {
    let _lock = process_wide();
    let seen = with_float32_matmul_precision(MatmulPrecision::High, || {
        let other = std::thread::spawn(float32_matmul_precision).join().expect("thread");
        assert_eq!(other, MatmulPrecision::Highest, "another thread keeps the process-wide value");
        let inner = with_float32_matmul_precision(MatmulPrecision::Medium, float32_matmul_precision);
        assert_eq!(inner, MatmulPrecision::Medium, "scopes nest");
        // The process-wide value moves, but this thread's scope stays above it.
        set_float32_matmul_precision(MatmulPrecision::Medium);
        let still = float32_matmul_precision();
        set_float32_matmul_precision(MatmulPrecision::Highest);
        assert_eq!(still, MatmulPrecision::High, "the scope is above the process-wide value");
        float32_matmul_precision()
    });
    assert_eq!(seen, MatmulPrecision::High);
    assert_eq!(float32_matmul_precision(), MatmulPrecision::Highest, "restored after the closure");
}

#[test]
fn a_scoped_precision_is_restored_after_a_panic() {
    let _lock = process_wide();
    let r = catch_unwind(|| {
        with_float32_matmul_precision(MatmulPrecision::High, || {
            with_float32_matmul_precision(MatmulPrecision::Medium, || panic!("inside the scope"))
        })
    });
    assert!(r.is_err());
    assert_eq!(float32_matmul_precision(), MatmulPrecision::Highest, "both scopes unwound");
    let r = catch_unwind(AssertUnwindSafe(|| {
        with_float32_matmul_precision(MatmulPrecision::High, || {
            let _ = catch_unwind(|| with_float32_matmul_precision(MatmulPrecision::Medium, || panic!("inner")));
            float32_matmul_precision()
        })
    }));
    assert_eq!(r.ok(), Some(MatmulPrecision::High), "an inner panic restores the outer scope");
}

/// `a @ b` of `[m, k] x [k, n]` f32 data at `precision` on `D`, read back.
fn product<D: locus::StaticDevice>(
    precision: MatmulPrecision,
    a: &[f32],
    b: &[f32],
    (m, k, n): (usize, usize, usize),
) -> Vec<f32> {
    let (ta, tb) = (Tensor::<D>::from_slice(a, [m, k]).unwrap(), Tensor::<D>::from_slice(b, [k, n]).unwrap());
    // Read outside the scope: the precision is taken when the op is called, though a
    // simulated stream may run it later on its own thread.
    let c = with_float32_matmul_precision(precision, || ta.matmul(&tb)).unwrap();
    c.to_vec().unwrap()
}

#[test]
fn high_and_medium_round_the_inputs_and_stay_within_their_tolerance() {
    let (m, k, n) = (33, 70, 21);
    let (a, b) = (floats(m * k, 1), floats(k * n, 2));
    let (want, scale) = reference(&wide(&a), &wide(&b), (1, m, k, n), k * n);
    let mut results = Vec::new();
    for p in [MatmulPrecision::Highest, MatmulPrecision::High, MatmulPrecision::Medium] {
        let gpu = product::<G>(p, &a, &b, (m, k, n));
        let host = product::<Cpu>(p, &a, &b, (m, k, n));
        assert_close(&wide(&gpu), &want, &scale, bound(p, k), &format!("{p} on cuda:0"));
        assert_close(&wide(&host), &want, &scale, bound(p, k), &format!("{p} on cpu"));
        // cuda:0 against the host kernels: both within the bound of the reference, and of
        // each other.
        assert_close(&wide(&gpu), &wide(&host), &scale, 2.0 * bound(p, k), &format!("{p}, cuda:0 against cpu"));
        results.push(host);
    }
    let differs = |x: &[f32], y: &[f32]| x.iter().zip(y).filter(|(a, b)| a != b).count();
    assert!(differs(&results[0], &results[1]) > m * n / 2, "High differs from Highest");
    assert!(differs(&results[1], &results[2]) > m * n / 2, "Medium differs from High");
    // The f32 error of Highest is far below TF32's: High is not exact f32 in disguise.
    let err = |r: &[f32]| r.iter().zip(&want).map(|(g, w)| (*g as f64 - w).abs()).fold(0.0, f64::max);
    assert!(err(&results[1]) > 8.0 * err(&results[0]), "{} vs {}", err(&results[1]), err(&results[0]));
    assert!(err(&results[2]) > 4.0 * err(&results[1]), "{} vs {}", err(&results[2]), err(&results[1]));
}

#[test]
fn the_host_model_is_exact_f32_of_inputs_rounded_to_nearest_even() {
    let (m, k, n) = (9, 40, 13);
    let (a, b) = (floats(m * k, 3), floats(k * n, 4));
    for (p, bits) in [(MatmulPrecision::High, 10), (MatmulPrecision::Medium, 7)] {
        let (ra, rb): (Vec<f32>, Vec<f32>) =
            (a.iter().map(|&x| round_to(x, bits)).collect(), b.iter().map(|&x| round_to(x, bits)).collect());
        assert_ne!(ra, a);
        let want = product::<Cpu>(MatmulPrecision::Highest, &ra, &rb, (m, k, n));
        assert_eq!(product::<Cpu>(p, &a, &b, (m, k, n)), want, "{p}");
    }
    // Ties go to even, and a value that fits TF32 stays.
    let tie = 1.0 + 2f32.powi(-11);
    assert_eq!(product::<Cpu>(MatmulPrecision::High, &[tie], &[1.0], (1, 1, 1)), vec![1.0]);
    let odd_tie = 1.0 + 3.0 * 2f32.powi(-11);
    assert_eq!(product::<Cpu>(MatmulPrecision::High, &[odd_tie], &[1.0], (1, 1, 1)), vec![1.0 + 2f32.powi(-9)]);
    assert_eq!(product::<Cpu>(MatmulPrecision::High, &[1.5], &[-3.0], (1, 1, 1)), vec![-4.5]);
}

#[test]
fn the_precision_applies_to_f32_alone() -> locus::Result<()> {
    let (m, k, n) = (5, 17, 4);
    let a: Vec<f64> = floats(m * k, 5).into_iter().map(|x| x as f64 + 1e-12).collect();
    let b: Vec<f64> = floats(k * n, 6).into_iter().map(f64::from).collect();
    let (ta, tb) = (Tensor::<G, f64>::from_slice(&a, [m, k])?, Tensor::<G, f64>::from_slice(&b, [k, n])?);
    let exact = with_float32_matmul_precision(MatmulPrecision::Highest, || ta.matmul(&tb))?.to_vec()?;
    let medium = with_float32_matmul_precision(MatmulPrecision::Medium, || ta.matmul(&tb))?.to_vec()?;
    assert_eq!(exact, medium, "f64 ignores the f32 precision");
    let (want, scale) = reference(&a, &b, (1, m, k, n), k * n);
    assert_close(&exact, &want, &scale, (k as f64 + 2.0) * 2f64.powi(-53), "f64");
    // bf16 products: f32 accumulation and one rounding whatever the setting.
    let hb: Vec<bf16> = a.iter().map(|&x| bf16::from_f64(x)).collect();
    let (ha, hw) = (Tensor::<G, bf16>::from_slice(&hb, [m, k])?, Tensor::<G, bf16>::from_slice(&hb[..k * n], [k, n])?);
    let exact = with_float32_matmul_precision(MatmulPrecision::Highest, || ha.matmul(&hw))?.to_vec()?;
    assert_eq!(exact, with_float32_matmul_precision(MatmulPrecision::High, || ha.matmul(&hw))?.to_vec()?);
    let i = Tensor::<G, i32>::from_vec(vec![1 << 20, 3], [1, 2])?;
    let j = Tensor::<G, i32>::from_vec(vec![(1 << 11) + 1, 1], [2, 1])?;
    let v = with_float32_matmul_precision(MatmulPrecision::Medium, || i.matmul(&j))?.item()?;
    assert_eq!(v, ((1i64 << 31) + (1 << 20) + 3) as i32, "integers stay exact (and wrap)");
    Ok(())
}

/// Checks `[batch, m, k] x rhs` for `T` on cuda:0 and on cpu against the loop of 2-d
/// products and the plain-Rust reference, with the rhs batched or (`shared`) one `[k, n]`.
fn check_batched<T: Element>(
    a: &[T],
    b: &[T],
    (batch, m, k, n): (usize, usize, usize, usize),
    shared: bool,
) -> Result<(), TestCaseError> {
    let e = |e: Error| TestCaseError::fail(e.to_string());
    let rhs_shape = if shared { vec![k, n] } else { vec![batch, k, n] };
    let rhs_stride = if shared { 0 } else { k * n };
    let run = |on_gpu: bool| -> locus::Result<Vec<T>> {
        with_float32_matmul_precision(MatmulPrecision::Highest, || {
            if on_gpu {
                let c = Tensor::<G, T>::from_slice(a, [batch, m, k])?
                    .matmul(&Tensor::<G, T>::from_slice(b, &rhs_shape)?)?;
                assert_eq!(c.shape(), &[batch, m, n]);
                c.to_vec()
            } else {
                Tensor::<Cpu, T>::from_slice(a, [batch, m, k])?
                    .matmul(&Tensor::<Cpu, T>::from_slice(b, &rhs_shape)?)?
                    .to_vec()
            }
        })
    };
    let (gpu, host) = (run(true).map_err(e)?, run(false).map_err(e)?);
    // The loop of 2-d products, on cuda:0.
    let mut looped = Vec::new();
    for z in 0..batch {
        let az = Tensor::<G, T>::from_slice(&a[z * m * k..(z + 1) * m * k], [m, k]).map_err(e)?;
        let bz = Tensor::<G, T>::from_slice(&b[z * rhs_stride..z * rhs_stride + k * n], [k, n]).map_err(e)?;
        looped.extend(
            with_float32_matmul_precision(MatmulPrecision::Highest, || az.matmul(&bz))
                .map_err(e)?
                .to_vec()
                .map_err(e)?,
        );
    }
    let dims = (batch, m, k, n);
    if T::DTYPE.is_float() {
        let (want, scale) = reference(&wide(a), &wide(b), dims, rhs_stride);
        // f32 accumulation, then (16-bit types) one rounding of the result.
        let rel = match T::DTYPE {
            DType::F64 => (k as f64 + 2.0) * 2f64.powi(-53),
            DType::BF16 => bound(MatmulPrecision::Highest, k) + 2f64.powi(-8),
            DType::F16 => bound(MatmulPrecision::Highest, k) + 2f64.powi(-11),
            _ => bound(MatmulPrecision::Highest, k),
        };
        assert_close(&wide(&gpu), &want, &scale, rel, "batched on cuda:0");
        assert_close(&wide(&host), &want, &scale, rel, "batched on cpu");
        assert_close(&wide(&looped), &wide(&gpu), &scale, 2.0 * rel, "batched against the loop");
    } else {
        let want = reference_int(a, b, dims, rhs_stride);
        prop_assert_eq!(&gpu, &want, "batched on cuda:0");
        prop_assert_eq!(&host, &want, "batched on cpu");
        prop_assert_eq!(&looped, &want, "the loop of 2-d products");
    }
    Ok(())
}

fn dims() -> impl Strategy<Value = (usize, usize, usize, usize)> {
    (0usize..5, 0usize..9, 0usize..9, 0usize..9)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn batched_products_match_the_loop_and_the_reference(d in dims(), shared: bool, seed: u64) {
        let (batch, m, k, n) = d;
        let rhs_len = if shared { k * n } else { batch * k * n };
        let (a, b) = (floats(batch * m * k, seed), floats(rhs_len, seed ^ 0xABCD));
        check_batched::<f32>(&a, &b, d, shared)?;
        let (a64, b64): (Vec<f64>, Vec<f64>) = (a.iter().map(|&x| x as f64 / 3.0).collect(), b.iter().map(|&x| x as f64 * 1.7).collect());
        check_batched::<f64>(&a64, &b64, d, shared)?;
        let (ab, bb): (Vec<bf16>, Vec<bf16>) = (a.iter().map(|&x| bf16::from_f32(x)).collect(), b.iter().map(|&x| bf16::from_f32(x * 3.0)).collect());
        check_batched::<bf16>(&ab, &bb, d, shared)?;
        let (ah, bh): (Vec<f16>, Vec<f16>) = (a.iter().map(|&x| f16::from_f32(x * 0.7)).collect(), b.iter().map(|&x| f16::from_f32(x)).collect());
        check_batched::<f16>(&ah, &bh, d, shared)?;
        let (ai, bi): (Vec<i32>, Vec<i32>) = (a.iter().map(|&x| (x * 3e4) as i32).collect(), b.iter().map(|&x| (x * 7e5) as i32).collect());
        check_batched::<i32>(&ai, &bi, d, shared)?;
        let (au, bu): (Vec<u8>, Vec<u8>) = (ai.iter().map(|&x| x as u8).collect(), bi.iter().map(|&x| x as u8).collect());
        check_batched::<u8>(&au, &bu, d, shared)?;
    }
}

#[test]
fn a_batch_larger_than_a_grid_dim_and_one_of_tall_products() -> locus::Result<()> {
    // 70000 products: more than the 65535 blocks a grid has along z (the integer kernel
    // loops over the batch).
    let batch = 70_000;
    let a: Vec<i32> = (0..batch as i32 * 2).map(|i| i % 7 - 3).collect();
    let b: Vec<i32> = (0..batch as i32 * 2).map(|i| i % 5 - 2).collect();
    let c =
        Tensor::<G, i32>::from_slice(&a, [batch, 1, 2])?.matmul(&Tensor::<G, i32>::from_slice(&b, [batch, 2, 1])?)?;
    assert_eq!(c.to_vec()?, reference_int(&a, &b, (batch, 1, 2, 1), 2));
    // A shared rhs with f32 batches: one tall product.
    let a = floats(6 * 50 * 8, 9);
    let b = floats(8 * 3, 10);
    let c = with_float32_matmul_precision(MatmulPrecision::High, || {
        Tensor::<G>::from_slice(&a, [6, 50, 8])?.matmul(&Tensor::<G>::from_slice(&b, [8, 3])?)
    })?;
    let (want, scale) = reference(&wide(&a), &wide(&b), (6, 50, 8, 3), 0);
    assert_close(&wide(&c.to_vec()?), &want, &scale, bound(MatmulPrecision::High, 8), "shared rhs at High");
    Ok(())
}

#[test]
fn empty_batches_and_empty_inner_dims() -> locus::Result<()> {
    let z = Tensor::<G>::zeros([0, 3, 4])?.matmul(&Tensor::<G>::zeros([0, 4, 5])?)?;
    assert_eq!(z.shape(), &[0, 3, 5]);
    let k0 = Tensor::<G, i32>::zeros([2, 3, 0])?.matmul(&Tensor::<G, i32>::zeros([0, 4])?)?;
    assert_eq!((k0.shape(), k0.to_vec()?), (&[2, 3, 4][..], vec![0; 24]));
    let k0 = Tensor::<G>::ones([2, 3, 0])?.matmul(&Tensor::<G>::ones([2, 0, 4])?)?;
    assert_eq!(k0.to_vec()?, vec![0.0; 24]);
    Ok(())
}

#[test]
fn shapes_that_do_not_fit_are_errors_naming_them() {
    let t = |s: &[usize]| Tensor::<G>::zeros(s).unwrap();
    let mismatch = |a: &[usize], b: &[usize]| match t(a).matmul(&t(b)) {
        Err(Error::ShapeMismatch { op: "matmul", lhs, rhs }) => assert_eq!((lhs.as_slice(), rhs.as_slice()), (a, b)),
        other => panic!("{a:?} x {b:?}: {other:?}"),
    };
    mismatch(&[2, 3], &[4, 5]);
    mismatch(&[2, 2, 3], &[3, 3, 4]);
    mismatch(&[2, 2, 3], &[2, 4, 4]);
    mismatch(&[2, 2, 3], &[4, 4]);
    for (a, b) in
        [(&[2, 3][..], &[2, 3, 4][..]), (&[3], &[3, 4]), (&[2, 3], &[3]), (&[1, 2, 2, 3], &[3, 4]), (&[], &[])]
    {
        match t(a).matmul(&t(b)) {
            Err(e @ Error::InvalidArgument { op: "matmul", .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(&format!("{a:?} x {b:?}")), "{msg}");
            }
            other => panic!("{a:?} x {b:?}: {other:?}"),
        }
    }
}

#[test]
fn a_16_bit_product_is_the_f32_product_of_the_widened_inputs_rounded_once() -> locus::Result<()> {
    // On the host, exactly; cuda:0 (cuBLAS, f32 accumulation in its own order) within one
    // rounding of the result and the f32 accumulation.
    let (b, m, k, n) = (3, 7, 40, 5);
    let (a, w) = (floats(b * m * k, 11), floats(k * n, 12));
    let exact = |x: &[f32], y: &[f32]| -> locus::Result<Vec<f32>> {
        with_float32_matmul_precision(MatmulPrecision::Highest, || {
            Tensor::<Cpu>::from_slice(x, [b, m, k])?.matmul(&Tensor::<Cpu>::from_slice(y, [k, n])?)?.to_vec()
        })
    };
    macro_rules! check {
        ($t:ty, $half_ulp:expr) => {{
            let (ha, hw): (Vec<$t>, Vec<$t>) =
                (a.iter().map(|&x| <$t>::from_f32(x)).collect(), w.iter().map(|&x| <$t>::from_f32(x)).collect());
            let widened = |v: &[$t]| v.iter().map(|x| x.to_f32()).collect::<Vec<f32>>();
            let want: Vec<$t> = exact(&widened(&ha), &widened(&hw))?.into_iter().map(<$t>::from_f32).collect();
            let host =
                Tensor::<Cpu, $t>::from_slice(&ha, [b, m, k])?.matmul(&Tensor::<Cpu, $t>::from_slice(&hw, [k, n])?)?;
            assert_eq!(host.to_vec()?, want, "{} on cpu", stringify!($t));
            let gpu =
                Tensor::<G, $t>::from_slice(&ha, [b, m, k])?.matmul(&Tensor::<G, $t>::from_slice(&hw, [k, n])?)?;
            let (wa, ww) = (wide(&ha), wide(&hw));
            let (_, scale) = reference(&wa, &ww, (b, m, k, n), 0);
            let rel = bound(MatmulPrecision::Highest, k) + 2.0 * $half_ulp;
            assert_close(&wide(&gpu.to_vec()?), &wide(&want), &scale, rel, stringify!($t));
        }};
    }
    check!(bf16, 2f64.powi(-8));
    check!(f16, 2f64.powi(-11));
    Ok(())
}
