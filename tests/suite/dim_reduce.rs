//! Reductions over one dim with `keepdim`: `sum_dim`, `mean_dim`, `max_dim` and `min_dim`
//! (values and indices), `argmax` and `argmin` (and `min` of all elements), on cuda:0 of the selected backend and on `Cpu`, against plain
//! loops over `Vec`s, for every element type (f32, f64, i32, i64, u8, bf16, f16): random
//! shapes of rank 1 to 4 and every dim, values drawn from a few so that ties are common,
//! NaN among the floats. Then the shapes
//! each GPU kernel path takes (short rows, long rows, long rows cut into segments, rows
//! that start unaligned, inner dims), and the errors.
//!
//! `max_dim`, `argmax`, `min_dim`, `argmin` and `min` are exact: the index of the first
//! maximum (minimum), NaN winning (the first NaN), and the element at that index, bit for
//! bit, `i32::MIN` and the u8 extremes included. Integer sums wrap and are exact.
//! Float sums and means accumulate in f64 on both backends: an f32 result is within
//! `1e-6 * Σ|x|` of the f64 reference (rounding the f64 sum to f32 is the bulk of it), an
//! f64 result within `1e-12 * Σ|x|`, bf16 and f16 results within two of their ulps
//! (`8e-3` and `2e-3` times `Σ|x|`).

use locus::{bf16, f16, Cpu, Cuda, DType, Device, Element, Error, Float, Tensor};
use proptest::prelude::*;

type G = Cuda<0>;

/// The shape of a reduction of `shape` over `dim`.
fn reduced(shape: &[usize], dim: usize, keepdim: bool) -> Vec<usize> {
    let mut s = shape.to_vec();
    if keepdim {
        s[dim] = 1;
    } else {
        s.remove(dim);
    }
    s
}

/// `x` of `shape` as `[outer, len, inner]` around `dim`.
fn split(shape: &[usize], dim: usize) -> (usize, usize, usize) {
    (shape[..dim].iter().product(), shape[dim], shape[dim + 1..].iter().product())
}

/// For each output of a reduction over `dim`, the elements it reduces, in order.
fn lanes<T: Copy>(x: &[T], shape: &[usize], dim: usize) -> Vec<Vec<T>> {
    let (outer, len, inner) = split(shape, dim);
    (0..outer * inner).map(|o| (0..len).map(|j| x[(o / inner * len + j) * inner + o % inner]).collect()).collect()
}

fn is_nan<T: PartialOrd>(v: T) -> bool {
    v.partial_cmp(&v).is_none()
}

/// The index of the first maximum of `lane`, NaN winning, the first NaN.
fn ref_argmax<T: PartialOrd + Copy>(lane: &[T]) -> usize {
    if let Some(i) = lane.iter().position(|&v| is_nan(v)) {
        return i;
    }
    let mut at = 0;
    for (i, &v) in lane.iter().enumerate() {
        if v > lane[at] {
            at = i;
        }
    }
    at
}

/// The index of the first minimum of `lane`, NaN winning, the first NaN.
fn ref_argmin<T: PartialOrd + Copy>(lane: &[T]) -> usize {
    if let Some(i) = lane.iter().position(|&v| is_nan(v)) {
        return i;
    }
    let mut at = 0;
    for (i, &v) in lane.iter().enumerate() {
        if v < lane[at] {
            at = i;
        }
    }
    at
}

/// The minimum of all of `x` (not empty) as `min()` defines it: NaN wins, and -0.0 is
/// below +0.0 (IEEE 754-2019 `minimum`), whatever the order of the elements.
fn ieee_min<T: Element>(x: &[T]) -> T {
    let m = x[ref_argmin(x)];
    let negative_zero = x.iter().find(|v| v.to_f64() == 0.0 && v.to_f64().is_sign_negative());
    match negative_zero {
        Some(&z) if !is_nan(m) && m.to_f64() == 0.0 => z,
        _ => m,
    }
}

/// The maximum of all of `x` (not empty) as `max()` defines it: NaN wins, and +0.0 is
/// above -0.0 (IEEE 754-2019 `maximum`), whatever the order of the elements.
fn ieee_max<T: Element>(x: &[T]) -> T {
    let m = x[ref_argmax(x)];
    let positive_zero = x.iter().find(|v| v.to_f64() == 0.0 && v.to_f64().is_sign_positive());
    match positive_zero {
        Some(&z) if !is_nan(m) && m.to_f64() == 0.0 => z,
        _ => m,
    }
}

/// The bits of each value, every NaN as one canonical NaN.
fn nan_any<T: Element>(v: &[T]) -> Vec<u64> {
    v.iter().map(|x| if is_nan(*x) { f64::NAN.to_bits() } else { x.to_f64().to_bits() }).collect()
}

fn bits<T: Element>(v: &[T]) -> Vec<u64> {
    v.iter().map(|x| x.to_f64().to_bits()).collect()
}

/// `max_dim` and `argmax` over `dim`, and `max` of all, on cuda:0 and on `Cpu` against the
/// loop, with and without `keepdim`.
fn check_max<T: Element>(x: &[T], shape: &[usize], dim: usize) -> Result<(), TestCaseError> {
    let lanes = lanes(x, shape, dim);
    let want_idx: Vec<i32> = lanes.iter().map(|l| ref_argmax(l) as i32).collect();
    let want_val: Vec<T> = lanes.iter().zip(&want_idx).map(|(l, &i)| l[i as usize]).collect();
    let g = Tensor::<G, T>::from_slice(x, shape).unwrap();
    let c = Tensor::<Cpu, T>::from_slice(x, shape).unwrap();
    for (name, t) in [("cuda:0", g.clone().into_dyn()), ("cpu", c.clone().into_dyn())] {
        if x.is_empty() {
            prop_assert!(matches!(t.max(), Err(Error::InvalidArgument { op: "max", .. })), "max of an empty tensor");
            continue;
        }
        let got = t.max().unwrap().to_vec().unwrap();
        let want = [ieee_max(x)];
        if is_nan(want[0]) {
            prop_assert!(is_nan(got[0]), "max on {} of {:?} is {:?}, not NaN", name, x, got);
        } else {
            prop_assert_eq!(bits(&got), bits(&want), "max on {} of {:?}", name, x);
        }
    }
    for keepdim in [false, true] {
        let out = reduced(shape, dim, keepdim);
        for (name, (v, i)) in [("cuda:0", max_dim(&g, dim, keepdim)), ("cpu", max_dim(&c, dim, keepdim))] {
            prop_assert_eq!(&v.0, &out, "max_dim values' shape on {}", name);
            prop_assert_eq!(&i.0, &out, "max_dim indices' shape on {}", name);
            prop_assert_eq!(&i.1, &want_idx, "max_dim({}) indices on {} of {:?} {:?}", dim, name, shape, x);
            prop_assert_eq!(bits(&v.1), bits(&want_val), "max_dim({}) values on {}", dim, name);
        }
        for (name, a) in [("cuda:0", arg(&g, dim, keepdim)), ("cpu", arg(&c, dim, keepdim))] {
            prop_assert_eq!(&a.0, &out, "argmax shape on {}", name);
            prop_assert_eq!(&a.1, &want_idx, "argmax({}) on {} of {:?} {:?}", dim, name, shape, x);
        }
    }
    Ok(())
}

/// `min_dim` and `argmin` over `dim`, and `min` of all, on cuda:0 and on `Cpu` against the
/// loop, with and without `keepdim`.
fn check_min<T: Element>(x: &[T], shape: &[usize], dim: usize) -> Result<(), TestCaseError> {
    let lanes = lanes(x, shape, dim);
    let want_idx: Vec<i32> = lanes.iter().map(|l| ref_argmin(l) as i32).collect();
    let want_val: Vec<T> = lanes.iter().zip(&want_idx).map(|(l, &i)| l[i as usize]).collect();
    let g = Tensor::<G, T>::from_slice(x, shape).unwrap();
    let c = Tensor::<Cpu, T>::from_slice(x, shape).unwrap();
    for (name, t) in [("cuda:0", g.clone().into_dyn()), ("cpu", c.clone().into_dyn())] {
        if x.is_empty() {
            prop_assert!(matches!(t.min(), Err(Error::InvalidArgument { op: "min", .. })), "min of an empty tensor");
        } else {
            let m = t.min().unwrap();
            prop_assert_eq!(m.shape(), &[] as &[usize]);
            let (got, want) = (m.to_vec().unwrap(), [ieee_min(x)]);
            if is_nan(want[0]) {
                // NaN wins; the all-element reduction gives a NaN, whose payload the GPU's
                // reduction does not keep (as `max()`'s).
                prop_assert!(is_nan(got[0]), "min on {} of {:?} is {:?}, not NaN", name, x, got);
            } else {
                prop_assert_eq!(bits(&got), bits(&want), "min on {} of {:?}", name, x);
            }
        }
        for keepdim in [false, true] {
            let out = reduced(shape, dim, keepdim);
            let (v, i) = t.min_dim(dim, keepdim).unwrap();
            prop_assert_eq!(v.shape(), &out[..], "min_dim values' shape on {}", name);
            prop_assert_eq!(i.shape(), &out[..], "min_dim indices' shape on {}", name);
            prop_assert_eq!(
                &i.to_vec().unwrap(),
                &want_idx,
                "min_dim({}) indices on {} of {:?} {:?}",
                dim,
                name,
                shape,
                x
            );
            // The element at each index, bit for bit, except a NaN's payload: min is the
            // negated max of the negation, and the GPU's negation keeps no NaN payload.
            prop_assert_eq!(nan_any(&v.to_vec().unwrap()), nan_any(&want_val), "min_dim({}) values on {}", dim, name);
            let a = t.argmin(dim, keepdim).unwrap();
            prop_assert_eq!(a.shape(), &out[..], "argmin shape on {}", name);
            prop_assert_eq!(&a.to_vec().unwrap(), &want_idx, "argmin({}) on {} of {:?} {:?}", dim, name, shape, x);
        }
    }
    Ok(())
}

type Got<T> = (Vec<usize>, Vec<T>);

fn max_dim<D: Device, T: Element>(t: &Tensor<D, T>, dim: usize, keepdim: bool) -> (Got<T>, Got<i32>) {
    let (v, i) = t.max_dim(dim, keepdim).unwrap();
    ((v.shape().to_vec(), v.to_vec().unwrap()), (i.shape().to_vec(), i.to_vec().unwrap()))
}

fn arg<D: Device, T: Element>(t: &Tensor<D, T>, dim: usize, keepdim: bool) -> Got<i32> {
    let a = t.argmax(dim, keepdim).unwrap();
    (a.shape().to_vec(), a.to_vec().unwrap())
}

/// `sum_dim` over `dim` on cuda:0 and on `Cpu` against the loop.
fn check_sums<T: Element>(x: &[T], shape: &[usize], dim: usize) -> Result<(), TestCaseError> {
    let lanes = lanes(x, shape, dim);
    let g = Tensor::<G, T>::from_slice(x, shape).unwrap();
    let c = Tensor::<Cpu, T>::from_slice(x, shape).unwrap();
    for keepdim in [false, true] {
        let out = reduced(shape, dim, keepdim);
        let (gs, cs) = (g.sum_dim(dim, keepdim).unwrap(), c.sum_dim(dim, keepdim).unwrap());
        prop_assert_eq!(gs.shape(), &out[..], "sum_dim shape on cuda:0");
        prop_assert_eq!(cs.shape(), &out[..], "sum_dim shape on cpu");
        for (name, got) in [("cuda:0", gs.to_vec().unwrap()), ("cpu", cs.to_vec().unwrap())] {
            for (l, v) in lanes.iter().zip(&got) {
                if T::DTYPE.is_float() {
                    let want: f64 = l.iter().map(|v| v.to_f64()).sum();
                    let tol = float_tol::<T>(l.iter().map(|v| v.to_f64().abs()).sum());
                    prop_assert!(
                        (v.to_f64() - want).abs() <= tol,
                        "sum_dim on {} of {:?}: {:?} vs {}",
                        name,
                        l,
                        v,
                        want
                    );
                } else {
                    let want = l.iter().fold(T::ZERO, |s, &v| Element::add(s, v));
                    prop_assert_eq!(*v, want, "sum_dim on {} wraps", name);
                }
            }
        }
    }
    Ok(())
}

/// The sum's tolerance for `T`, given `Σ|x|` (see the module doc).
fn float_tol<T: Element>(scale: f64) -> f64 {
    scale
        * match T::DTYPE {
            DType::F32 => 1e-6,
            DType::BF16 => 8e-3,
            DType::F16 => 2e-3,
            _ => 1e-12,
        }
}

/// `mean_dim` over `dim` on cuda:0 and on `Cpu` against the loop; NaN for an empty dim.
fn check_means<T: Float>(x: &[T], shape: &[usize], dim: usize) -> Result<(), TestCaseError> {
    let lanes = lanes(x, shape, dim);
    let g = Tensor::<G, T>::from_slice(x, shape).unwrap();
    let c = Tensor::<Cpu, T>::from_slice(x, shape).unwrap();
    for keepdim in [false, true] {
        let out = reduced(shape, dim, keepdim);
        let (gm, cm) = (g.mean_dim(dim, keepdim).unwrap(), c.mean_dim(dim, keepdim).unwrap());
        prop_assert_eq!(gm.shape(), &out[..], "mean_dim shape on cuda:0");
        prop_assert_eq!(cm.shape(), &out[..], "mean_dim shape on cpu");
        for (name, got) in [("cuda:0", gm.to_vec().unwrap()), ("cpu", cm.to_vec().unwrap())] {
            for (l, v) in lanes.iter().zip(&got) {
                let v = v.to_f64();
                if l.is_empty() {
                    prop_assert!(v.is_nan(), "the mean of nothing is NaN, got {} on {}", v, name);
                    continue;
                }
                let n = l.len() as f64;
                let want = l.iter().map(|v| v.to_f64()).sum::<f64>() / n;
                let tol = float_tol::<T>(l.iter().map(|v| v.to_f64().abs()).sum::<f64>() / n);
                prop_assert!((v - want).abs() <= tol, "mean_dim on {} of {:?}: {} vs {}", name, l, v, want);
            }
        }
    }
    Ok(())
}

/// A shape of rank 1 to 4 (dims 0 to 5; a 0 in one case of eight), a dim of it, and one
/// value per element from `pick`.
fn reduction<T: std::fmt::Debug + Clone + 'static>(
    pick: impl Strategy<Value = T> + Clone + 'static,
) -> impl Strategy<Value = (Vec<usize>, usize, Vec<T>)> {
    proptest::collection::vec(prop_oneof![1 => Just(0usize), 7 => 1usize..=5], 1..=4).prop_flat_map(move |shape| {
        let n = shape.iter().product::<usize>();
        (Just(shape.clone()), 0..shape.len(), proptest::collection::vec(pick.clone(), n))
    })
}

fn f64s() -> impl Strategy<Value = f64> + Clone {
    prop_oneof![
        8 => (-3i8..=3).prop_map(f64::from),
        1 => prop_oneof![Just(f64::NAN), Just(-0.0), Just(f64::INFINITY), Just(f64::NEG_INFINITY), Just(0.25)],
    ]
}

/// Runs the max checks when the dim has elements, else checks that both are errors.
fn check_max_or_error<T: Element>(x: &[T], shape: &[usize], dim: usize) -> Result<(), TestCaseError> {
    if shape[dim] > 0 {
        check_min(x, shape, dim)?;
        return check_max(x, shape, dim);
    }
    let g = Tensor::<G, T>::from_slice(x, shape).unwrap();
    for keepdim in [false, true] {
        let (m, a) = (g.max_dim(dim, keepdim), g.argmax(dim, keepdim));
        prop_assert!(matches!(m, Err(Error::InvalidArgument { op: "max_dim", .. })), "max_dim of an empty dim");
        prop_assert!(matches!(a, Err(Error::InvalidArgument { op: "argmax", .. })), "argmax of an empty dim");
        let c = g.to::<Cpu>().unwrap();
        prop_assert!(c.max_dim(dim, keepdim).is_err() && c.argmax(dim, keepdim).is_err());
        let (m, a) = (g.min_dim(dim, keepdim), g.argmin(dim, keepdim));
        prop_assert!(matches!(m, Err(Error::InvalidArgument { op: "min_dim", .. })), "min_dim of an empty dim");
        prop_assert!(matches!(a, Err(Error::InvalidArgument { op: "argmin", .. })), "argmin of an empty dim");
        prop_assert!(c.min_dim(dim, keepdim).is_err() && c.argmin(dim, keepdim).is_err());
        prop_assert!(matches!(g.min(), Err(Error::InvalidArgument { op: "min", .. })), "min of an empty tensor");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn reductions_of_f32((shape, dim, x) in reduction(f64s().prop_map(|v| v as f32))) {
        check_max_or_error::<f32>(&x, &shape, dim)?;
        let finite: Vec<f32> = x.iter().map(|v| if v.is_finite() { *v } else { 1.5 }).collect();
        check_sums::<f32>(&finite, &shape, dim)?;
        check_means::<f32>(&finite, &shape, dim)?;
    }

    #[test]
    fn reductions_of_f64((shape, dim, x) in reduction(f64s())) {
        check_max_or_error::<f64>(&x, &shape, dim)?;
        let finite: Vec<f64> = x.iter().map(|v| if v.is_finite() { *v } else { -2.5 }).collect();
        check_sums::<f64>(&finite, &shape, dim)?;
        check_means::<f64>(&finite, &shape, dim)?;
    }

    #[test]
    fn reductions_of_bf16((shape, dim, x) in reduction(f64s().prop_map(bf16::from_f64))) {
        check_max_or_error::<bf16>(&x, &shape, dim)?;
        let finite: Vec<bf16> = x.iter().map(|v| if v.is_finite() { *v } else { bf16::from_f32(0.75) }).collect();
        check_sums::<bf16>(&finite, &shape, dim)?;
        check_means::<bf16>(&finite, &shape, dim)?;
    }

    #[test]
    fn reductions_of_f16((shape, dim, x) in reduction(f64s().prop_map(f16::from_f64))) {
        check_max_or_error::<f16>(&x, &shape, dim)?;
        let finite: Vec<f16> = x.iter().map(|v| if v.is_finite() { *v } else { f16::from_f32(-1.25) }).collect();
        check_sums::<f16>(&finite, &shape, dim)?;
        check_means::<f16>(&finite, &shape, dim)?;
    }

    #[test]
    fn reductions_of_i32((shape, dim, x) in reduction(prop_oneof![6 => -3i32..=3, 1 => Just(i32::MIN), 1 => Just(i32::MAX)])) {
        check_max_or_error::<i32>(&x, &shape, dim)?;
        check_sums::<i32>(&x, &shape, dim)?;
    }

    #[test]
    fn reductions_of_i64((shape, dim, x) in reduction(prop_oneof![6 => -3i64..=3, 1 => Just(i64::MIN), 1 => Just(i64::MAX), 1 => Just(1i64 << 40)])) {
        check_max_or_error::<i64>(&x, &shape, dim)?;
        check_sums::<i64>(&x, &shape, dim)?;
    }

    #[test]
    fn reductions_of_u8((shape, dim, x) in reduction(prop_oneof![6 => 0u8..=4, 1 => Just(255u8)])) {
        check_max_or_error::<u8>(&x, &shape, dim)?;
        check_sums::<u8>(&x, &shape, dim)?;
    }
}

/// `max()` and `min()` of zeros of both signs give +0.0 and -0.0 wherever the deciding zero
/// sits, on every path of the GPU's all-element reduction (one block; per-block partials
/// then one block) and on the host: +0.0 is above -0.0, so the order the parallel tree
/// combines in cannot change the bits (an H100 once gave +0.0 for the first minimum -0.0).
#[test]
fn signed_zeros_give_the_same_extremum_in_any_order() -> locus::Result<()> {
    fn check<T: Element>(n: usize, at: usize) -> locus::Result<()> {
        let (neg, pos) = (T::from_f64(-0.0), T::from_f64(0.0));
        let mut all_neg = vec![neg; n];
        all_neg[at] = pos;
        let mut all_pos = vec![pos; n];
        all_pos[at] = neg;
        for (name, x) in [("one +0.0 among -0.0", all_neg), ("one -0.0 among +0.0", all_pos)] {
            for t in
                [Tensor::<G, T>::from_slice(&x, [n])?.into_dyn(), Tensor::<Cpu, T>::from_slice(&x, [n])?.into_dyn()]
            {
                let (max, min) = (t.max()?.item()?.to_f64(), t.min()?.item()?.to_f64());
                let on = format!("{} {name} ({n}, at {at}) on {}", T::DTYPE, t.device());
                assert!(max == 0.0 && max.is_sign_positive(), "max of {on} is {max:?}");
                assert!(min == 0.0 && min.is_sign_negative(), "min of {on} is {min:?}");
            }
        }
        Ok(())
    }
    for n in [2, 5, 1000, 300_001] {
        for at in [0, n / 2, n - 1] {
            check::<f32>(n, at)?;
            check::<f64>(n, at)?;
            check::<bf16>(n, at)?;
            check::<f16>(n, at)?;
        }
    }
    Ok(())
}

/// `n` values cycling through a few, with the maximum `top` placed at `at` (every place
/// listed, so the first one must win).
fn with_max_at<T: Element>(n: usize, low: impl Fn(usize) -> T, top: T, at: &[usize]) -> Vec<T> {
    let mut v: Vec<T> = (0..n).map(low).collect();
    for &i in at {
        v[i] = top;
    }
    v
}

/// The shapes each GPU kernel path takes: short rows (a warp each), long rows (a block
/// each) of odd lengths (rows start unaligned), few very long rows (cut into segments,
/// the maximum repeated in a later segment), and reductions over an inner dim.
#[test]
fn argmax_over_every_kernel_path() {
    // Warp rows, block rows, and segmented rows (2 rows of 70001: the second copy of the
    // maximum lies in another segment).
    for (rows, len) in [(37, 33), (5, 1027), (3, 5000), (2, 70_001)] {
        let n = rows * len;
        let x = with_max_at(n, |i| ((i * 7919) % 1000) as f32, 5000.0, &[len / 3, len + len - 2, len + len - 1]);
        check_max(&x, &[rows, len], 1).unwrap();
        let d = with_max_at(n, |i| ((i * 31) % 97) as f64 - 50.0, 1e300, &[len - 1, len + 1]);
        check_max(&d, &[rows, len], 1).unwrap();
    }
    // One row of 2^20 u8 (vectors of 16), the maximum at the end and once in the middle.
    let u = with_max_at(1 << 20, |i| (i % 200) as u8, 255, &[(1 << 20) - 1, 777_777]);
    check_max(&u, &[1, 1 << 20], 1).unwrap();
    check_max(&u, &[1 << 20], 0).unwrap();
    let h = with_max_at(3 * 5000, |i| bf16::from_f32((i % 300) as f32), bf16::INFINITY, &[4999, 5000 + 17]);
    check_max(&h, &[3, 5000], 1).unwrap();
    check_max(&h, &[15, 1000], 0).unwrap();
    let f = with_max_at(2 * 40_001, |i| f16::from_f32((i % 999) as f32), f16::MAX, &[40_000, 40_001 + 3]);
    check_max(&f, &[2, 40_001], 1).unwrap();
    let i = with_max_at(3 * 40_000, |i| (i % 1000) as i32 - 500, i32::MAX, &[39_999, 40_000 + 12_345]);
    check_max(&i, &[3, 40_000], 1).unwrap();
    // Inner dims: [6, 50, 7] over dims 0 and 1, [1000, 3] over dim 0.
    let x: Vec<f32> = (0..6 * 50 * 7).map(|i| ((i * 13) % 17) as f32).collect();
    check_max(&x, &[6, 50, 7], 1).unwrap();
    check_max(&x, &[6, 50, 7], 0).unwrap();
    let x: Vec<i32> = (0..3000).map(|i| i % 1001).collect();
    check_max(&x, &[1000, 3], 0).unwrap();
    // Inner dims cut into segments: the maximum of a column in two segments (rows 10 and
    // 650 of [2, 700, 40] over dim 1; rows 5 and 2900 of [3000, 5] over dim 0), a partial
    // tile of columns (40 = 32 + 8).
    let mut x: Vec<f32> = (0..2 * 700 * 40).map(|i| ((i * 7) % 23) as f32).collect();
    for (o, c) in [(0, 3), (1, 39), (1, 0)] {
        x[(o * 700 + 10) * 40 + c] = 99.0;
        x[(o * 700 + 650) * 40 + c] = 99.0;
    }
    check_max(&x, &[2, 700, 40], 1).unwrap();
    check_max(&x, &[1400, 40], 0).unwrap();
    let mut x: Vec<u8> = (0..3000 * 5).map(|i| (i % 7) as u8).collect();
    x[5 * 5 + 2] = 200;
    x[2900 * 5 + 2] = 200;
    x[2999 * 5 + 4] = 9;
    check_max(&x, &[3000, 5], 0).unwrap();
}

/// NaN wins wherever it is, and the first NaN's index is the answer, in every path.
#[test]
fn argmax_finds_the_first_nan_in_every_path() {
    for (rows, len, nans) in [(4, 31, vec![5, 7]), (3, 3001, vec![2999, 3000]), (1, 100_003, vec![90_001, 99_999])] {
        let mut x: Vec<f32> = (0..rows * len).map(|i| (i % 101) as f32).collect();
        for r in 0..rows {
            for &j in &nans {
                x[r * len + j] = f32::NAN;
            }
        }
        x[len / 2] = f32::INFINITY;
        check_max(&x, &[rows, len], 1).unwrap();
        let (v, i) = Tensor::<G>::from_slice(&x, [rows, len]).unwrap().max_dim(1, false).unwrap();
        assert!(v.to_vec().unwrap().iter().all(|v| v.is_nan()));
        assert!(i.to_vec().unwrap().iter().all(|&i| i as usize == nans[0]));
    }
    // Over an inner dim cut into segments: NaNs only in later segments of a column.
    let mut x: Vec<f64> = (0..4000 * 3).map(|i| (i % 13) as f64).collect();
    x[3500 * 3 + 1] = f64::NAN;
    x[3999 * 3 + 1] = f64::NAN;
    x[2000 * 3 + 2] = f64::NAN;
    check_max(&x, &[4000, 3], 0).unwrap();
    let (v, i) = Tensor::<G, f64>::from_slice(&x, [4000, 3]).unwrap().max_dim(0, false).unwrap();
    assert_eq!(i.to_vec().unwrap()[1..], [3500, 2000]);
    assert!(v.to_vec().unwrap()[1..].iter().all(|v| v.is_nan()));
    let ties = Tensor::<G, f64>::from_vec(vec![-0.0, 0.0, 0.0, -0.0], [2, 2]).unwrap();
    let (v, i) = ties.max_dim(1, false).unwrap();
    assert_eq!(i.to_vec().unwrap(), vec![0, 0], "-0.0 and 0.0 tie: the first wins");
    let v = v.to_vec().unwrap();
    assert!(v[0].is_sign_negative() && v[1].is_sign_positive(), "the value is the element at the index");
}

/// Sums and means over few long columns, which the GPU reduces in tiles of 32 columns
/// (a bias's gradient: [tokens, width] over the tokens): one segment per column
/// ([512, 64], [5, 64, 3]), columns cut into segments whose partial results a second
/// launch adds ([3, 700, 40] with a partial tile, [20000, 5]), rows not a multiple of the
/// tile's 32 or of its 4-row unroll ([40, 33], [2, 1157, 70]), in every summed type; integer
/// sums wrap exactly, float sums within the module's tolerance of the f64 reference.
#[test]
fn sums_over_few_long_columns_in_every_tile_path() {
    let shapes: [(&[usize], usize); 6] =
        [(&[512, 64], 0), (&[5, 64, 3], 1), (&[3, 700, 40], 1), (&[20_000, 5], 0), (&[40, 33], 0), (&[2, 1157, 70], 1)];
    for (shape, dim) in shapes {
        let n: usize = shape.iter().product();
        let f: Vec<f64> = (0..n).map(|i| ((i * 7919 % 2003) as f64 - 1001.0) / 64.0).collect();
        let f32s: Vec<f32> = f.iter().map(|&v| v as f32).collect();
        check_sums(&f32s, shape, dim).unwrap();
        check_means(&f32s, shape, dim).unwrap();
        check_sums(&f, shape, dim).unwrap();
        let h: Vec<bf16> = f.iter().map(|&v| bf16::from_f64(v / 16.0)).collect();
        check_sums(&h, shape, dim).unwrap();
        check_means(&h, shape, dim).unwrap();
        let h: Vec<f16> = f.iter().map(|&v| f16::from_f64(v / 64.0)).collect();
        check_means(&h, shape, dim).unwrap();
        let i: Vec<i32> = (0..n).map(|k| if k % 97 == 3 { i32::MAX } else { (k % 1000) as i32 - 500 }).collect();
        check_sums(&i, shape, dim).unwrap();
        let l: Vec<i64> = (0..n).map(|k| if k % 89 == 1 { i64::MAX - k as i64 } else { k as i64 * 3 - 7 }).collect();
        check_sums(&l, shape, dim).unwrap();
        let u: Vec<u8> = (0..n).map(|k| (k * 31 % 256) as u8).collect();
        check_sums(&u, shape, dim).unwrap();
    }
}

#[test]
fn keepdim_shapes_and_a_0_d_result() -> locus::Result<()> {
    let x = Tensor::<G>::from_vec((0..24).map(|v| v as f32).collect(), [2, 3, 4])?;
    for dim in 0..3 {
        let mut kept = [2, 3, 4];
        kept[dim] = 1;
        let mut dropped = vec![2, 3, 4];
        dropped.remove(dim);
        assert_eq!(x.sum_dim(dim, true)?.shape(), &kept[..]);
        assert_eq!(x.mean_dim(dim, true)?.shape(), &kept[..]);
        assert_eq!(x.argmax(dim, true)?.shape(), &kept[..]);
        let (v, i) = x.max_dim(dim, true)?;
        assert_eq!((v.shape(), i.shape()), (&kept[..], &kept[..]));
        assert_eq!(x.sum_dim(dim, false)?.shape(), &dropped[..]);
        assert_eq!(x.argmax(dim, false)?.shape(), &dropped[..]);
        assert_eq!(x.sum_dim(dim, true)?.to_vec()?, x.sum_dim(dim, false)?.to_vec()?);
    }
    let v = Tensor::<G, i32>::from_vec(vec![4, 9, 2], [3])?;
    let a = v.argmax(0, false)?;
    assert_eq!((a.shape(), a.item()?), (&[][..], 1));
    assert_eq!(v.argmax(0, true)?.shape(), &[1]);
    let (m, i) = v.max_dim(0, false)?;
    assert_eq!((m.item()?, i.item()?), (9, 1));
    assert_eq!(v.sum_dim(0, true)?.to_vec()?, vec![15]);
    let e = Tensor::<G, f64>::zeros([0, 3])?;
    assert_eq!(e.mean_dim(1, true)?.shape(), &[0, 1]);
    assert!(e.mean_dim(0, false)?.to_vec()?.iter().all(|v| v.is_nan()), "a mean over nothing is NaN");
    Ok(())
}

#[test]
fn bad_dims_and_empty_dims_are_errors() -> locus::Result<()> {
    let x = Tensor::<G>::zeros([2, 3])?;
    for keepdim in [false, true] {
        assert!(matches!(x.sum_dim(2, keepdim), Err(Error::InvalidArgument { op: "sum_dim", .. })));
        assert!(matches!(x.mean_dim(2, keepdim), Err(Error::InvalidArgument { op: "mean_dim", .. })));
        assert!(matches!(x.max_dim(2, keepdim), Err(Error::InvalidArgument { op: "max_dim", .. })));
        assert!(matches!(x.argmax(9, keepdim), Err(Error::InvalidArgument { op: "argmax", .. })));
    }
    let s = Tensor::<Cpu>::full([], 1.0)?;
    assert!(s.argmax(0, false).is_err() && s.max_dim(0, true).is_err() && s.mean_dim(0, false).is_err());
    let empty = Tensor::<G>::zeros([3, 0])?;
    let e = empty.max_dim(1, false).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { op: "max_dim", .. }));
    assert!(e.to_string().contains("dim 1 of shape [3, 0] has 0 elements"), "{e}");
    assert!(matches!(empty.argmax(1, true), Err(Error::InvalidArgument { op: "argmax", .. })));
    // Empty elsewhere: the reduced dim has elements, the result is empty.
    let (v, i) = empty.max_dim(0, false)?;
    assert_eq!((v.shape(), i.shape()), (&[0][..], &[0][..]));
    assert!(matches!(Tensor::<G>::zeros([0, 0])?.argmax(0, false), Err(Error::InvalidArgument { .. })));
    Ok(())
}

#[test]
fn dim_reductions_of_dyn_tensors_stay_on_their_device() -> locus::Result<()> {
    let d = Tensor::<G, i32>::from_vec(vec![1, 8, 3, 7], [2, 2])?.into_dyn();
    let a = d.argmax(1, false)?;
    assert_eq!((a.device().to_string(), a.to_vec()?), ("cuda:0".into(), vec![1, 1]));
    let (v, i) = d.max_dim(0, true)?;
    assert_eq!((v.to_vec()?, i.to_vec()?, i.device()), (vec![3, 8], vec![1, 0], d.device()));
    Ok(())
}

/// `sum_squares` (gradient clipping's norm, one read): against the f64 sum of the squares
/// of the values the tensor holds, at lengths on both sides of the GPU's switch from one
/// block to per-block partials (65536), in f64, f32 and bf16; and its gradient, `2 x g`.
#[test]
fn sum_squares_is_the_sum_of_the_squares_and_its_gradient_is_twice_the_input() -> locus::Result<()> {
    fn check<T: Float>(v: &[f64], tol: f64) -> locus::Result<()> {
        let held: Vec<T> = v.iter().map(|&x| T::from_f64(x)).collect();
        let want: f64 = held.iter().map(|x| x.to_f64() * x.to_f64()).sum();
        let got = Tensor::<G, T>::from_vec(held, [v.len()])?.sum_squares()?.item()?.to_f64();
        assert!((got - want).abs() <= tol * want.max(1.0), "{} of {}: {got} against {want}", T::DTYPE, v.len());
        Ok(())
    }
    for n in [0usize, 1, 7, 1000, 65_536, 65_537, 200_001] {
        let v: Vec<f64> = (0..n).map(|i| ((i * 37 % 101) as f64 - 50.0) / 7.0).collect();
        check::<f64>(&v, 1e-12)?;
        check::<f32>(&v, 1e-6)?;
        check::<bf16>(&v, 8e-3)?;
    }
    let m = Tensor::<G>::from_vec((0..12).map(|i| i as f32 - 5.5).collect(), [3, 4])?;
    assert_eq!(m.sum_squares()?.item()?, (0..12).map(|i| (i as f32 - 5.5).powi(2)).sum::<f32>());
    let p = locus::Param::new(Tensor::<G, f64>::from_vec(vec![1.0, -2.0, 0.5], [3])?);
    (p.sum_squares()? * 3.0)?.backward()?;
    assert_eq!(p.grad().expect("a gradient").to_vec()?, vec![6.0, -12.0, 3.0]);
    Ok(())
}
