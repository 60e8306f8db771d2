//! `softmax`, `log_softmax` and `cross_entropy` (issue 20): on cuda:0 of the selected
//! backend and on `Cpu` (the host kernels), each against a plain-Rust f64 reference, over
//! every dim of random shapes and at the row lengths where the GPU changes kernels (a
//! warp: up to 128 and 1024; a block holding the row: aligned or not; rows longer than a
//! block's registers, read twice; an inner dim, a thread per column). Then the special
//! values (rows summing to 1, logits of ±1e4, -inf, +inf, NaN) and the errors.
//!
//! Tolerances: f32 results are within `2e-5` relative (softmax; plus `1e-30` absolute for
//! values near underflow) or `2e-5 * max(1, |x|)` (log-softmax and losses) of the f64
//! reference: a GPU sums in f32, one rounding per term in a tree of a few dozen levels,
//! and a row with one term missing or counted twice is off by about `1 / len`, which
//! these bounds catch for every length tested. f64 results are within `1e-12`. The 16-bit
//! types are computed in f32 (GPU) or f64 (host) and rounded once: within two of their
//! ulps (`8e-3` relative for bf16, `1e-3` for f16, whose subnormals are `6e-8` apart).

use locus::{bf16, f16, Cpu, Cuda, DType, DeviceId, Dyn, Error, Float, Tensor};
use proptest::prelude::*;

type G = Cuda<0>;

/// Deterministic values in `[-scale, scale)` from a seed (a 64-bit LCG's top bits).
fn values(n: usize, seed: u64, scale: f64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// The `[outer, len, inner]` view of `dim` of `shape`.
fn split(shape: &[usize], dim: usize) -> (usize, usize, usize) {
    (shape[..dim].iter().product(), shape[dim], shape[dim + 1..].iter().product())
}

/// Softmax (or log-softmax) of `x` over `dim` of `shape`, in f64, by the definition.
fn reference(x: &[f64], shape: &[usize], dim: usize, log: bool) -> Vec<f64> {
    let (outer, len, inner) = split(shape, dim);
    let mut out = vec![0.0; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| (o * len + j) * inner + i;
            let m = (0..len).map(|j| x[at(j)]).fold(f64::NEG_INFINITY, |m, v| if v.is_nan() || v > m { v } else { m });
            let s: f64 = (0..len).map(|j| (x[at(j)] - m).exp()).sum();
            for j in 0..len {
                out[at(j)] = if log { x[at(j)] - m - s.ln() } else { (x[at(j)] - m).exp() / s };
            }
        }
    }
    out
}

/// The tolerance of element type `T` around `want` (see the module doc).
fn close<T: Float>(got: T, want: f64, log: bool) -> bool {
    let got = got.to_f64();
    if want.is_nan() || got.is_nan() {
        return want.is_nan() && got.is_nan();
    }
    if want.is_infinite() {
        return got == want;
    }
    let (rel, abs) = match T::DTYPE {
        DType::F64 => (1e-12, 1e-300),
        DType::BF16 => (8e-3, 1e-30),
        DType::F16 => (1e-3, 1.2e-7),
        _ => (2e-5, 1e-30),
    };
    let bound = if log { rel * want.abs().max(1.0) } else { rel * want.abs() + abs };
    (got - want).abs() <= bound
}

/// Checks (log-)softmax of `x` over `dim` on cuda:0 and on the host against the reference.
fn check<T: Float>(x: &[f64], shape: &[usize], dim: usize) -> Result<(), String> {
    let data: Vec<T> = x.iter().map(|&v| T::from_f64(v)).collect();
    // The reference sees the values the tensors hold (rounded to T).
    let exact: Vec<f64> = data.iter().map(|v| v.to_f64()).collect();
    let g = Tensor::<G, T>::from_slice(&data, shape).map_err(|e| e.to_string())?;
    let c = Tensor::<Cpu, T>::from_slice(&data, shape).map_err(|e| e.to_string())?;
    for log in [false, true] {
        let want = reference(&exact, shape, dim, log);
        let run = |t: &dyn Fn() -> locus::Result<Vec<T>>| t().map_err(|e| e.to_string());
        let on_gpu = run(&|| if log { g.log_softmax(dim)?.to_vec() } else { g.softmax(dim)?.to_vec() })?;
        let on_host = run(&|| if log { c.log_softmax(dim)?.to_vec() } else { c.softmax(dim)?.to_vec() })?;
        for (i, w) in want.iter().enumerate() {
            let name = if log { "log_softmax" } else { "softmax" };
            if !close(on_gpu[i], *w, log) || !close(on_host[i], *w, log) {
                return Err(format!(
                    "{name} {} of shape {shape:?} over dim {dim}, element {i}: cuda:0 {:?}, cpu {:?}, reference {w}",
                    T::DTYPE,
                    on_gpu[i],
                    on_host[i]
                ));
            }
        }
    }
    Ok(())
}

/// A shape of rank 1..=4 with dims 1..=6, and a dim of it.
fn shape_and_dim() -> impl Strategy<Value = (Vec<usize>, usize)> {
    proptest::collection::vec(1usize..=6, 1..=4).prop_flat_map(|s| {
        let rank = s.len();
        (Just(s), 0..rank)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn softmax_matches_the_reference_over_every_dim((shape, dim) in shape_and_dim(), seed in any::<u64>()) {
        let x = values(shape.iter().product(), seed, 8.0);
        check::<f32>(&x, &shape, dim).map_err(TestCaseError::fail)?;
        check::<f64>(&x, &shape, dim).map_err(TestCaseError::fail)?;
        check::<bf16>(&x, &shape, dim).map_err(TestCaseError::fail)?;
        check::<f16>(&x, &shape, dim).map_err(TestCaseError::fail)?;
    }
}

#[test]
fn every_kernel_of_the_last_dim_and_of_an_inner_dim() -> Result<(), String> {
    // Lengths at each switch of the GPU's kernels: a warp (3, 128; 129, 1000, 1024), a
    // block in vectors (4096, 10000) or single loads (1025, 10001), and past a block's
    // registers (40000 f32, 30001, 20000 f64), read twice.
    for len in [3, 128, 129, 1000, 1024, 1025, 4096, 10_000, 10_001, 30_001, 40_000] {
        let x = values(3 * len, len as u64, 12.0);
        check::<f32>(&x, &[3, len], 1)?;
    }
    for len in [3, 129, 1025, 8192, 20_000] {
        let x = values(2 * len, len as u64 + 1, 12.0);
        check::<f64>(&x, &[2, len], 1)?;
    }
    // The 16-bit types: warps, a block in vectors of 8 (8192) or single loads (8191),
    // and rows read twice (40000).
    for len in [3, 1000, 8191, 8192, 40_000] {
        let x = values(2 * len, len as u64 + 2, 12.0);
        check::<bf16>(&x, &[2, len], 1)?;
        check::<f16>(&x, &[2, len], 1)?;
    }
    // An inner dim: the softmax runs down columns of 10000.
    let x = values(10_000 * 3, 7, 12.0);
    check::<f32>(&x, &[10_000, 3], 0)?;
    check::<f32>(&x, &[2, 5000, 3], 1)?;
    Ok(())
}

#[test]
fn rows_sum_to_one_and_large_logits_stay_finite() -> locus::Result<()> {
    for len in [3usize, 300, 5000, 40_000] {
        for scale in [1.0, 1e4] {
            let x: Vec<f32> = values(4 * len, len as u64, scale).into_iter().map(|v| v as f32).collect();
            let g = Tensor::<G>::from_slice(&x, [4, len])?;
            let p = g.softmax(1)?.to_vec()?;
            for row in p.chunks(len) {
                assert!(row.iter().all(|v| v.is_finite() && (0.0..=1.0).contains(v)), "len {len}, scale {scale}");
                let total: f64 = row.iter().map(|&v| v as f64).sum();
                assert!((total - 1.0).abs() < 1e-4, "a row of {len} at scale {scale} sums to {total}");
            }
            let l = g.log_softmax(1)?.to_vec()?;
            assert!(l.iter().all(|v| v.is_finite() && *v <= 0.0), "log_softmax of len {len} at scale {scale}");
            let cols = g.softmax(0)?.to_vec()?;
            for i in 0..len {
                let total: f64 = (0..4).map(|r| cols[r * len + i] as f64).sum();
                assert!((total - 1.0).abs() < 1e-5, "column {i} of [4, {len}] sums to {total}");
            }
        }
    }
    // Logits of ±1e4 side by side: the largest takes everything, exactly.
    let g = Tensor::<G>::from_vec(vec![1e4, -1e4, 0.0, 1e4 - 1.0], [4])?;
    let p = g.softmax(0)?.to_vec()?;
    let e = (-1.0f64).exp();
    assert!((p[0] as f64 - 1.0 / (1.0 + e)).abs() < 1e-6 && p[1] == 0.0 && p[2] == 0.0, "{p:?}");
    let l1 = g.log_softmax(0)?.to_vec()?[1] as f64;
    assert!((l1 - (-2e4 - (1.0 + e).ln())).abs() < 4e-3, "{l1} (an f32 near 2e4 is good to 2e-3)");
    Ok(())
}

/// Rows of `len` with -inf in a run at the start (a whole thread's share, for the kernels
/// that merge per-thread sums), an all -inf row, a row with +inf and a row with NaN.
fn special_rows(len: usize) -> Vec<f64> {
    let mut x = values(4 * len, 11, 3.0);
    x[..len / 2 + 1].fill(f64::NEG_INFINITY);
    x[len..2 * len].fill(f64::NEG_INFINITY);
    x[2 * len + len / 3] = f64::INFINITY;
    x[3 * len + len - 1] = f64::NAN;
    x
}

#[test]
fn minus_infinity_gives_zero_and_rows_without_a_finite_maximum_are_nan() -> Result<(), String> {
    for len in [3, 100, 1000, 3000, 40_000] {
        let x = special_rows(len);
        check::<f32>(&x, &[4, len], 1)?;
        check::<f64>(&x, &[4, len], 1)?;
        check::<bf16>(&x, &[4, len], 1)?;
        check::<f16>(&x, &[4, len], 1)?;
        // The same rows as columns.
        let mut t = vec![0.0; x.len()];
        for r in 0..4 {
            for j in 0..len {
                t[j * 4 + r] = x[r * len + j];
            }
        }
        check::<f32>(&t, &[len, 4], 0)?;
    }
    // Spelled out once: -inf is 0 (log: -inf), a row of -inf is NaN.
    let x = Tensor::<G>::from_vec(vec![f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY, f32::NEG_INFINITY], [2, 2])
        .map_err(|e| e.to_string())?;
    let p = x.softmax(1).and_then(|t| t.to_vec()).map_err(|e| e.to_string())?;
    assert_eq!(&p[..2], &[0.0, 1.0]);
    assert!(p[2].is_nan() && p[3].is_nan());
    let l = x.log_softmax(1).and_then(|t| t.to_vec()).map_err(|e| e.to_string())?;
    assert_eq!(&l[..2], &[f32::NEG_INFINITY, 0.0]);
    Ok(())
}

#[test]
fn softmax_of_a_scalar_and_of_empty_tensors() -> locus::Result<()> {
    assert_eq!(Tensor::<G>::full([], 3.0)?.softmax(0)?.item()?, 1.0);
    assert_eq!(Tensor::<G>::full([], 3.0)?.log_softmax(0)?.item()?, 0.0);
    assert!(Tensor::<G>::full([], 3.0)?.softmax(1).is_err());
    for (shape, dim) in [(vec![0usize], 0usize), (vec![2, 0], 1), (vec![2, 0], 0), (vec![0, 3, 2], 1)] {
        let t = Tensor::<G>::zeros(&shape)?;
        assert_eq!(t.softmax(dim)?.shape(), &shape[..]);
        assert_eq!(t.log_softmax(dim)?.numel(), 0);
    }
    Ok(())
}

#[test]
fn a_dim_out_of_range_is_an_error_naming_the_shape() -> locus::Result<()> {
    let t = Tensor::<G>::zeros([2, 3])?;
    let e = t.softmax(2).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { op: "softmax", .. }), "{e}");
    assert!(e.to_string().contains("[2, 3]"), "{e}");
    assert!(matches!(t.log_softmax(7), Err(Error::InvalidArgument { op: "log_softmax", .. })));
    Ok(())
}

/// The mean cross-entropy of `[n, c]` logits against `targets`, in f64.
fn reference_loss(x: &[f64], targets: &[i32], c: usize) -> f64 {
    let n = targets.len();
    let total: f64 = (0..n)
        .map(|i| {
            let row = &x[i * c..(i + 1) * c];
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let lse = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
            lse - row[targets[i] as usize]
        })
        .sum();
    total / n as f64
}

fn check_loss<T: Float>(n: usize, c: usize, seed: u64, scale: f64) -> locus::Result<()> {
    let data: Vec<T> = values(n * c, seed, scale).into_iter().map(T::from_f64).collect();
    let exact: Vec<f64> = data.iter().map(|v| v.to_f64()).collect();
    let targets: Vec<i32> = values(n, seed ^ 1, 1.0).iter().map(|v| ((v + 1.0) / 2.0 * c as f64) as i32).collect();
    let want = reference_loss(&exact, &targets, c);
    let on_gpu =
        Tensor::<G, T>::from_slice(&data, [n, c])?.cross_entropy(&Tensor::<G, i32>::from_slice(&targets, [n])?)?;
    let on_host =
        Tensor::<Cpu, T>::from_slice(&data, [n, c])?.cross_entropy(&Tensor::<Cpu, i32>::from_slice(&targets, [n])?)?;
    assert_eq!(on_gpu.shape(), &[] as &[usize]);
    for (got, name) in [(on_gpu.item()?, "cuda:0"), (on_host.item()?, "cpu")] {
        assert!(close(got, want, true), "cross_entropy {} [{n}, {c}] on {name}: {got:?}, reference {want}", T::DTYPE);
    }
    Ok(())
}

#[test]
fn cross_entropy_matches_the_reference() -> locus::Result<()> {
    // Classes for a warp per row (1, 3, 100, 1024) and a block per row (1025, 5000).
    for (n, c) in [(1, 1), (5, 3), (64, 100), (7, 1024), (9, 1025), (4, 5000)] {
        check_loss::<f32>(n, c, (n * c) as u64, 8.0)?;
        check_loss::<f64>(n, c, (n * c) as u64, 8.0)?;
        check_loss::<bf16>(n, c, (n * c) as u64, 8.0)?;
        check_loss::<f16>(n, c, (n * c) as u64, 8.0)?;
    }
    check_loss::<f32>(16, 700, 3, 1e4)?;
    // Against log_softmax, spelled out.
    let x = Tensor::<G>::from_vec(vec![1.0, 2.0, 3.0, -1.0, 0.0, 5.0], [2, 3])?;
    let t = Tensor::<G, i32>::from_vec(vec![2, 0], [2])?;
    let l = x.log_softmax(1)?.to_vec()?;
    let want = -(l[2] + l[3]) / 2.0;
    assert!((x.cross_entropy(&t)?.item()? - want).abs() < 1e-6);
    // No samples: the mean of nothing is NaN, as in PyTorch.
    let empty = Tensor::<G>::zeros([0, 4])?.cross_entropy(&Tensor::<G, i32>::zeros([0])?)?;
    assert!(empty.item()?.is_nan());
    // Placements may be Dyn, checked at run time.
    let d = x.clone().into_dyn().cross_entropy(&t.clone().into_dyn())?;
    assert_eq!(d.item()?, x.cross_entropy(&t)?.item()?);
    Ok(())
}

#[test]
fn cross_entropy_errors_name_the_bad_target_or_shape() -> locus::Result<()> {
    let x = Tensor::<G>::zeros([3, 4])?;
    for (targets, bad) in [(vec![0, -1, 2], "target -1 of sample 1"), (vec![0, 1, 4], "target 4 of sample 2")] {
        let e = x.cross_entropy(&Tensor::<G, i32>::from_vec(targets, [3])?).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { op: "cross_entropy", .. }), "{e}");
        assert!(e.to_string().contains(&format!("{bad} is out of range for 4 classes")), "{e}");
    }
    // The first bad target is named, on the GPU too (many rows, a block per row).
    let wide = Tensor::<G>::zeros([300, 2000])?;
    let mut t = vec![1i32; 300];
    (t[170], t[40], t[299]) = (i32::MIN, 2000, -5);
    let e = wide.cross_entropy(&Tensor::<G, i32>::from_slice(&t, [300])?).unwrap_err();
    assert!(e.to_string().contains("target 2000 of sample 40 "), "{e}");
    // The same on the host placement, and no class at all.
    let e = Tensor::<Cpu>::zeros([2, 0])?.cross_entropy(&Tensor::<Cpu, i32>::zeros([2])?).unwrap_err();
    assert!(e.to_string().contains("target 0 of sample 0 is out of range for 0 classes"), "{e}");
    // Shapes: one target per sample, logits [N, C], targets [N].
    let e = x.cross_entropy(&Tensor::<G, i32>::zeros([4])?).unwrap_err();
    assert_eq!(e, Error::ShapeMismatch { op: "cross_entropy", lhs: vec![3, 4], rhs: vec![4] });
    for (logits, targets) in
        [(vec![4], vec![1]), (vec![2, 3, 4], vec![2]), (vec![3, 4], vec![3, 1]), (vec![3, 4], vec![])]
    {
        let e = Tensor::<G>::zeros(&logits)?.cross_entropy(&Tensor::<G, i32>::zeros(&targets)?).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { op: "cross_entropy", .. }), "{logits:?}, {targets:?}: {e}");
    }
    // Dyn placements that differ.
    let e = x.clone().into_dyn().cross_entropy(&Tensor::<Cpu, i32>::zeros([3])?.into_dyn()).unwrap_err();
    assert_eq!(e, Error::DeviceMismatch { op: "cross_entropy", lhs: DeviceId::Cuda(0), rhs: DeviceId::Cpu });
    // The tensors stay usable after an error.
    let loss = x.cross_entropy(&Tensor::<G, i32>::zeros([3])?)?.item()?;
    assert!((loss - 4.0f32.ln()).abs() < 1e-6, "{loss}");
    let d = Tensor::<Dyn>::zeros_on(Dyn::new(DeviceId::Cuda(0)), [1, 2])?;
    let loss = d.cross_entropy(&Tensor::<Dyn, i32>::zeros_on(Dyn::new(DeviceId::Cuda(0)), [1])?)?.item()?;
    assert!((loss - 2.0f32.ln()).abs() < 1e-6, "{loss}");
    Ok(())
}

/// LayerNorm of `rows` rows of `len` (`x`, weight `w`, bias `b`) and the gradients of
/// `Σ c · y` with respect to x, w and b, in f64 by the definition (biased variance).
#[allow(clippy::type_complexity)]
fn layer_norm_reference(
    x: &[f64],
    (w, b, c): (&[f64], &[f64], &[f64]),
    len: usize,
    eps: f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mut y, mut dx, mut dw, mut db) = (vec![0.0; x.len()], vec![0.0; x.len()], vec![0.0; len], vec![0.0; len]);
    for (r, row) in x.chunks(len).enumerate() {
        let n = len as f64;
        let mean = row.iter().sum::<f64>() / n;
        let rstd = 1.0 / (row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n + eps).sqrt();
        let xhat: Vec<f64> = row.iter().map(|v| (v - mean) * rstd).collect();
        let dxhat: Vec<f64> = (0..len).map(|j| c[r * len + j] * w[j]).collect();
        let (m1, m2) = (dxhat.iter().sum::<f64>() / n, dxhat.iter().zip(&xhat).map(|(d, h)| d * h).sum::<f64>() / n);
        for j in 0..len {
            y[r * len + j] = xhat[j] * w[j] + b[j];
            dx[r * len + j] = rstd * (dxhat[j] - m1 - xhat[j] * m2);
            dw[j] += c[r * len + j] * xhat[j];
            db[j] += c[r * len + j];
        }
    }
    (y, dx, dw, db)
}

/// `nn::LayerNorm` forward and backward (one kernel forward; backward the input's gradient,
/// then the weight's and bias's in tiles of columns) against [`layer_norm_reference`], at
/// the row lengths where the GPU goes from a warp per row to a block, and at row counts
/// where the weight's and bias's sums are cut into segments (1300 and 2000 rows, a partial
/// tile of columns in the second), in f64, f32 and bf16 (`tol` relative to
/// `max(1, |want|)`); then `Tensor::layer_norm` without weight and bias (the input's
/// gradient alone), and with a weight and bias that track no gradient.
fn layer_norm_matches<T: Float>(tol: f64) -> locus::Result<()> {
    use locus::nn::{LayerNorm, Module};
    use locus::Param;
    let shapes = [(3, 1), (4, 5), (5, 64), (2, 1024), (3, 1025), (2, 3000), (1300, 40), (2000, 70)];
    for (k, (rows, len)) in shapes.into_iter().enumerate() {
        let seed = 100 + k as u64;
        let (x, w, b, c) = (
            values(rows * len, seed, 2.0),
            values(len, seed + 1, 1.5),
            values(len, seed + 2, 1.0),
            values(rows * len, seed + 3, 1.0),
        );
        let typed =
            |v: &[f64], shape: &[usize]| Tensor::<G, T>::from_vec(v.iter().map(|&v| T::from_f64(v)).collect(), shape);
        // The reference reads what the tensors hold (rounded to T).
        let held = |v: &[f64]| v.iter().map(|&v| T::from_f64(v).to_f64()).collect::<Vec<f64>>();
        let (x, w, b, c) = (held(&x), held(&w), held(&b), held(&c));
        let mut norm = LayerNorm::<G, T>::new(len)?;
        norm.weight.set(typed(&w, &[len])?)?;
        norm.bias.set(typed(&b, &[len])?)?;
        let input = Param::new(typed(&x, &[rows, len])?);
        let y = norm.forward(&input)?;
        (&y * &typed(&c, &[rows, len])?)?.sum()?.backward()?;
        let (want_y, want_dx, want_dw, want_db) = layer_norm_reference(&x, (&w, &b, &c), len, 1e-5);
        let grad = |p: &Param<G, T>| p.grad().expect("a gradient").to_vec();
        for (what, got, want) in [
            ("y", y.to_vec()?, want_y),
            ("dx", grad(&input)?, want_dx),
            ("dweight", grad(&norm.weight)?, want_dw),
            ("dbias", grad(&norm.bias)?, want_db),
        ] {
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let (g, w) = (g.to_f64(), *w);
                assert!(
                    (g - w).abs()
                        <= tol
                            * w.abs().max(1.0)
                            * if what == "dweight" || what == "dbias" { rows as f64 } else { 1.0 },
                    "{} rows of {len}, {what}[{i}]: {g} against {w}",
                    rows
                );
            }
        }
        // No weight and bias: the reference with weight 1 and bias 0; the input's gradient.
        let (ones, zeros) = (vec![1.0; len], vec![0.0; len]);
        let (want_y, want_dx, _, _) = layer_norm_reference(&x, (&ones, &zeros, &c), len, 1e-5);
        let plain = Param::new(typed(&x, &[rows, len])?);
        let y = plain.layer_norm(None, 1e-5)?;
        (&y * &typed(&c, &[rows, len])?)?.sum()?.backward()?;
        // Weight and bias as plain tensors: the input's gradient alone is asked for.
        let frozen = Param::new(typed(&x, &[rows, len])?);
        let (w_t, b_t) = (typed(&w, &[len])?, typed(&b, &[len])?);
        (&frozen.layer_norm(Some((&w_t, &b_t)), 1e-5)? * &typed(&c, &[rows, len])?)?.sum()?.backward()?;
        let (_, want_frozen_dx, _, _) = layer_norm_reference(&x, (&w, &b, &c), len, 1e-5);
        for (what, got, want) in [
            ("plain y", y.to_vec()?, want_y),
            ("plain dx", grad(&plain)?, want_dx),
            ("dx beside frozen weight", grad(&frozen)?, want_frozen_dx),
        ] {
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                let (g, w) = (g.to_f64(), *w);
                assert!((g - w).abs() <= tol * w.abs().max(1.0), "{rows} rows of {len}, {what}[{i}]: {g} against {w}");
            }
        }
    }
    Ok(())
}

#[test]
fn layer_norm_and_its_gradients_match_the_f64_reference_at_every_row_length() -> locus::Result<()> {
    layer_norm_matches::<f64>(1e-10)?;
    layer_norm_matches::<f32>(2e-4)?;
    layer_norm_matches::<bf16>(3e-2)
}

/// The gradients of `softmax` and `log_softmax` over the last dim (one kernel each) against
/// f64 references computed from what the forward pass returned, at the row lengths where
/// the GPU goes from a warp per row to a block, in f64, f32 and bf16 (`tol` relative to
/// `max(1, |want|)`): `y (c - Σ c y)` and `c - exp(y) Σ c` for the loss `Σ c y`.
fn softmax_gradients_match<T: Float>(tol: f64) -> locus::Result<()> {
    use locus::Param;
    for (k, (rows, len)) in [(3, 1), (4, 5), (5, 64), (2, 1024), (3, 1025), (2, 3000)].into_iter().enumerate() {
        let seed = 200 + k as u64;
        let held = |v: Vec<f64>| v.into_iter().map(|v| T::from_f64(v).to_f64()).collect::<Vec<f64>>();
        let (x, c) = (held(values(rows * len, seed, 3.0)), held(values(rows * len, seed + 1, 1.0)));
        let typed =
            |v: &[f64], shape: &[usize]| Tensor::<G, T>::from_vec(v.iter().map(|&v| T::from_f64(v)).collect(), shape);
        for log in [false, true] {
            let input = Param::new(typed(&x, &[rows, len])?);
            let y = if log { input.log_softmax(1)? } else { input.softmax(1)? };
            (&y * &typed(&c, &[rows, len])?)?.sum()?.backward()?;
            let (y, got) = (y.to_vec()?, input.grad().expect("a gradient").to_vec()?);
            for r in 0..rows {
                let at = r * len..(r + 1) * len;
                let (yr, cr) = (&y[at.clone()], &c[at.clone()]);
                let s: f64 = if log { cr.iter().sum() } else { cr.iter().zip(yr).map(|(c, y)| c * y.to_f64()).sum() };
                for (i, (g, (y, c))) in got[at].iter().zip(yr.iter().zip(cr)).enumerate() {
                    let y = y.to_f64();
                    let want = if log { c - y.exp() * s } else { y * (c - s) };
                    assert!(
                        (g.to_f64() - want).abs() <= tol * want.abs().max(1.0),
                        "{} log={log}, {rows} rows of {len}, row {r}[{i}]: {} against {want}",
                        T::DTYPE,
                        g.to_f64()
                    );
                }
            }
        }
    }
    Ok(())
}

#[test]
fn softmax_gradients_over_the_last_dim_match_the_f64_reference_at_every_row_length() -> locus::Result<()> {
    softmax_gradients_match::<f64>(1e-10)?;
    softmax_gradients_match::<f32>(1e-4)?;
    softmax_gradients_match::<bf16>(5e-2)
}
