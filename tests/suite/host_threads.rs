//! The host kernels split over the worker pool (issue 23) against the single-threaded
//! loops they replaced, kept here as the reference: elementwise ops, copies, transposes,
//! `max`, integer sums and sums over a dim other than the last bit for bit; float sums
//! and means within the documented tolerance (`n · 2⁻⁵³ · Σ|x|` in f64, plus the final
//! rounding); f32 matmul within the tolerance of any summation order. Random lengths
//! include 0, odd ones, and ones long enough to be split (`LOCUS_HOST_THREADS`, default
//! the cores: on one core nothing splits and the comparison still holds). Both on `cpu`
//! (the kernel on the calling thread) and on a simulated device (a job on its stream).

use locus::{Cpu, Cuda, Element, Error, Tensor};
use proptest::prelude::*;

type G = Cuda<0>;

/// Whether `cuda:0` is a simulated device (the host backend), whose jobs these tests are
/// about; on a GPU its kernels are not the host loops (NaN payloads, the sign of an empty
/// sum), and the GPU suite checks them elsewhere.
fn simulated() -> bool {
    locus::backend_name().is_ok_and(|b| b == "host")
}

/// Deterministic values from `seed`, with NaN, infinities, -0.0 and subnormals mixed in.
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut z = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|i| {
            z ^= z << 13;
            z ^= z >> 7;
            z ^= z << 17;
            match z % 97 {
                0 => f32::NAN,
                1 => f32::INFINITY,
                2 => -0.0,
                3 => f32::MIN_POSITIVE / 4.0,
                _ => ((z >> 11) as f32 / (1u64 << 53) as f32 - 0.5) * (1 + i % 7) as f32,
            }
        })
        .collect()
}

/// Finite values only, for sums and matmuls compared within a tolerance.
fn finite(seed: u64, n: usize) -> Vec<f32> {
    values(seed, n).into_iter().map(|v| if v.is_finite() { v } else { 0.25 }).collect()
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

// The reference: the single-threaded loops of the host backend before the split.

fn old_binary<T: Element>(op: fn(T, T) -> T, l: &[T], r: &[T], shape: &[usize], ls: &[usize], rs: &[usize]) -> Vec<T> {
    let n: usize = shape.iter().product();
    let mut out = vec![T::ZERO; n];
    let rank = shape.len();
    let mut idx = vec![0usize; rank];
    let (mut li, mut ri) = (0usize, 0usize);
    for o in out.iter_mut() {
        *o = op(l[li], r[ri]);
        for d in (0..rank).rev() {
            idx[d] += 1;
            li += ls[d];
            ri += rs[d];
            if idx[d] < shape[d] {
                break;
            }
            li -= ls[d] * idx[d];
            ri -= rs[d] * idx[d];
            idx[d] = 0;
        }
    }
    out
}

/// Sum (`mean` false) or mean over `len` of `[outer, len, inner]`, f64 accumulation.
fn old_sum(x: &[f32], outer: usize, len: usize, inner: usize, mean: bool) -> Vec<f32> {
    let mut out = vec![0.0; outer * inner];
    for o in 0..outer {
        for i in 0..inner {
            let s: f64 = (0..len).map(|j| x[(o * len + j) * inner + i] as f64).sum();
            out[o * inner + i] = (if mean { s / len as f64 } else { s }) as f32;
        }
    }
    out
}

/// The loop's clamp to `[-0.5, 0.25]`, written as it was (NaN stays NaN).
#[allow(clippy::manual_clamp)]
fn old_clamp(v: f32) -> f32 {
    if v < -0.5 {
        -0.5
    } else if v > 0.25 {
        0.25
    } else {
        v
    }
}

fn old_max(x: &[f32]) -> f32 {
    (1..x.len()).fold(x[0], |m, j| if m.is_nan() || m >= x[j] { m } else { x[j] })
}

fn old_matmul<T: Element>(a: &[T], b: &[T], m: usize, k: usize, n: usize) -> Vec<T> {
    let mut out = vec![T::ZERO; m * n];
    for i in 0..m {
        for p in 0..k {
            for j in 0..n {
                out[i * n + j] = out[i * n + j].add(a[i * k + p].mul(b[p * n + j]));
            }
        }
    }
    out
}

fn old_transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; rows * cols];
    for i in 0..rows {
        for j in 0..cols {
            out[j * rows + i] = x[i * cols + j];
        }
    }
    out
}

/// `got` is `want` up to reordering the f64 sum of `n` terms of absolute sum `abs`, then
/// rounding to f32: a sum order's error bound plus one f32 rounding.
fn close(got: f32, want: f32, n: usize, abs: f64) -> bool {
    if want.is_nan() || want.is_infinite() {
        return got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan());
    }
    let bound = 2.0 * n as f64 * f64::EPSILON * abs + (want.abs() as f64) * f32::EPSILON as f64 + f64::MIN_POSITIVE;
    (got as f64 - want as f64).abs() <= bound
}

/// Lengths: empty, short and odd, and long enough to be split over the pool.
fn length() -> impl Strategy<Value = usize> {
    prop_oneof![0usize..10, 10usize..3000, 65_537usize..140_000]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn elementwise_ops_match_the_single_threaded_loops_bit_for_bit(n in length(), seed: u64) {
        let xs = values(seed, n);
        let ys = values(seed ^ 1, n);
        let x = Tensor::<Cpu>::from_slice(&xs, [n])?;
        let y = Tensor::<Cpu>::from_slice(&ys, [n])?;
        let map = |f: fn(f32) -> f32| bits(&xs.iter().map(|&v| f(v)).collect::<Vec<_>>());
        prop_assert_eq!(bits(&x.relu()?.to_vec()?), map(|v| if v < 0.0 { 0.0 } else { v }));
        prop_assert_eq!(bits(&x.square()?.to_vec()?), map(|v| v * v));
        prop_assert_eq!(bits(&x.exp()?.to_vec()?), map(f32::exp));
        prop_assert_eq!(bits(&x.abs()?.sqrt()?.to_vec()?), map(|v| (v as f64).abs() as f32).iter().map(|&b| f32::from_bits(b).sqrt().to_bits()).collect::<Vec<_>>());
        prop_assert_eq!(bits(&x.clamp(-0.5, 0.25)?.to_vec()?), map(old_clamp));
        let zip = |f: fn(f32, f32) -> f32| bits(&old_binary(f, &xs, &ys, &[n], &[1], &[1]));
        prop_assert_eq!(bits(&(&x + &y)?.to_vec()?), zip(|a, b| a + b));
        prop_assert_eq!(bits(&(&x - &y)?.to_vec()?), zip(|a, b| a - b));
        prop_assert_eq!(bits(&(&x * &y)?.to_vec()?), zip(|a, b| a * b));
        prop_assert_eq!(bits(&(&x / &y)?.to_vec()?), zip(|a, b| a / b));
        prop_assert_eq!(bits(&(&x * 3.0)?.to_vec()?), map(|v| v * 3.0));
        prop_assert_eq!(bits(&(2.0 - &x)?.to_vec()?), map(|v| 2.0 - v));
        // The same add as a job on a simulated device's stream.
        if simulated() {
            let (gx, gy) = (Tensor::<G>::from_slice(&xs, [n])?, Tensor::<G>::from_slice(&ys, [n])?);
            prop_assert_eq!(bits(&(&gx + &gy)?.to_vec()?), zip(|a, b| a + b));
        }
    }

    #[test]
    fn broadcast_ops_match_the_odometer_bit_for_bit(rows in 0usize..300, cols in prop_oneof![1usize..9, 200usize..700], seed: u64) {
        let xs = values(seed, rows * cols);
        let row = values(seed ^ 2, cols);
        let col = values(seed ^ 3, rows);
        let x = Tensor::<Cpu>::from_slice(&xs, [rows, cols])?;
        let r = Tensor::<Cpu>::from_slice(&row, [1, cols])?;
        let c = Tensor::<Cpu>::from_slice(&col, [rows, 1])?;
        let want = old_binary(|a: f32, b| a * b, &xs, &row, &[rows, cols], &[cols, 1], &[0, 1]);
        prop_assert_eq!(bits(&(&x * &r)?.to_vec()?), bits(&want));
        let want = old_binary(|a: f32, b| a - b, &col, &row, &[rows, cols], &[1, 0], &[0, 1]);
        prop_assert_eq!(bits(&(&c - &r)?.to_vec()?), bits(&want));
        if simulated() {
            let g = Tensor::<G>::from_slice(&col, [rows, 1])?;
            let want = old_binary(|a: f32, b| a + b, &col, &row, &[rows, cols], &[1, 0], &[0, 1]);
            prop_assert_eq!(bits(&(&g + &Tensor::<G>::from_slice(&row, [1, cols])?)?.to_vec()?), bits(&want));
        }
    }

    #[test]
    fn reductions_match_within_the_documented_tolerance(n in length(), seed: u64) {
        let xs = finite(seed, n);
        let abs: f64 = xs.iter().map(|v| v.abs() as f64).sum();
        let mut on = vec![Tensor::<Cpu>::from_slice(&xs, [n])?.into_dyn()];
        if simulated() {
            on.push(Tensor::<G>::from_slice(&xs, [n])?.into_dyn());
        }
        for x in on {
            let (sum, want) = (x.sum()?.item()?, old_sum(&xs, 1, n, 1, false)[0]);
            prop_assert!(close(sum, want, n, abs), "sum of {} is {} where the loop gave {}", n, sum, want);
            if n == 0 {
                prop_assert_eq!(sum.to_bits(), want.to_bits(), "a sum of nothing is -0.0, as the loop's");
            }
            if n > 0 {
                let (mean, want) = (x.mean()?.item()?, old_sum(&xs, 1, n, 1, true)[0]);
                prop_assert!(close(mean, want, n, abs / n as f64), "mean {} against {}", mean, want);
            }
        }
        // Max is exact, NaN included (the first NaN wins, as in the loop).
        let with_nan = values(seed, n);
        if n > 0 {
            let got = Tensor::<Cpu>::from_slice(&with_nan, [n])?.max()?.item()?;
            prop_assert_eq!(got.to_bits(), old_max(&with_nan).to_bits());
        }
        // Integer sums wrap, in any order the same.
        let ints: Vec<i32> = (0..n).map(|i| (i as i32).wrapping_mul(0x3D7F_1A2B) ^ seed as i32).collect();
        let want = ints.iter().fold(0i32, |s, &v| s.wrapping_add(v));
        prop_assert_eq!(Tensor::<Cpu, i32>::from_slice(&ints, [n])?.sum()?.item()?, want);
    }

    #[test]
    fn sums_over_a_dim_match_the_loop(rows in 0usize..400, cols in prop_oneof![1usize..5, 300usize..600], seed: u64) {
        let xs = finite(seed, rows * cols);
        let x = Tensor::<Cpu>::from_slice(&xs, [rows, cols])?;
        // Over dim 0 every output keeps the loop's order: bit for bit.
        prop_assert_eq!(bits(&x.sum_dim(0, false)?.to_vec()?), bits(&old_sum(&xs, 1, rows, cols, false)));
        // Over the last dim each row is summed in lanes: within the tolerance.
        let got = x.sum_dim(1, false)?.to_vec()?;
        let want = old_sum(&xs, rows, cols, 1, false);
        for (r, (g, w)) in got.iter().zip(&want).enumerate() {
            let abs: f64 = xs[r * cols..(r + 1) * cols].iter().map(|v| v.abs() as f64).sum();
            prop_assert!(close(*g, *w, cols, abs), "row {}: {} against {}", r, g, w);
        }
    }

    #[test]
    fn transposes_copies_and_matmuls_match(m in 0usize..90, k in 0usize..90, n in prop_oneof![0usize..5, 300usize..800], seed: u64) {
        let a = finite(seed, m * k);
        let b = finite(seed ^ 5, k * n);
        let ta = Tensor::<Cpu>::from_slice(&a, [m, k])?;
        let tb = Tensor::<Cpu>::from_slice(&b, [k, n])?;
        prop_assert_eq!(bits(&tb.t()?.to_vec()?), bits(&old_transpose(&b, k, n)));
        let got = ta.matmul(&tb)?.to_vec()?;
        let want = old_matmul(&a, &b, m, k, n);
        for i in 0..m {
            for j in 0..n {
                let abs: f64 = (0..k).map(|p| (a[i * k + p] as f64 * b[p * n + j] as f64).abs()).sum();
                let bound = 4.0 * k as f64 * f32::EPSILON as f64 * abs + 1e-30;
                prop_assert!((got[i * n + j] as f64 - want[i * n + j] as f64).abs() <= bound, "[{}, {}]", i, j);
            }
        }
        // Integer matmul stays a loop (split by rows): exact.
        let ia: Vec<i32> = a.iter().map(|v| (v * 64.0) as i32).collect();
        let ib: Vec<i32> = b.iter().map(|v| (v * 64.0) as i32).collect();
        let got = Tensor::<Cpu, i32>::from_slice(&ia, [m, k])?.matmul(&Tensor::<Cpu, i32>::from_slice(&ib, [k, n])?)?;
        prop_assert_eq!(got.to_vec()?, old_matmul(&ia, &ib, m, k, n));
        // Copies: a narrow of a long run and a concatenation.
        if n > 2 {
            let cut = tb.narrow(1, 1, n - 2)?.to_vec()?;
            let want: Vec<f32> = (0..k).flat_map(|p| b[p * n + 1..p * n + n - 1].to_vec()).collect();
            prop_assert_eq!(bits(&cut), bits(&want));
        }
        let joined = Tensor::concat(&[&tb.reshape([k * n])?, &ta.reshape([m * k])?])?.to_vec()?;
        prop_assert_eq!(bits(&joined), bits(&[b.clone(), a.clone()].concat()));
    }
}

#[test]
fn an_integer_division_by_zero_late_in_a_split_tensor_is_an_error() -> locus::Result<()> {
    let n = 200_001;
    let num: Vec<i32> = (0..n as i32).collect();
    let mut den = vec![3i32; n];
    den[n - 5] = 0;
    let fine: Vec<i32> = num.iter().map(|&v| v / 3).collect();
    let e = (&Tensor::<Cpu, i32>::from_slice(&num, [n])? / &Tensor::<Cpu, i32>::from_slice(&den, [n])?).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { op: "div", .. }), "{e}");
    let g = (&Tensor::<G, i32>::from_slice(&num, [n])? / &Tensor::<G, i32>::from_slice(&den, [n])?).unwrap_err();
    assert!(matches!(g, Error::InvalidArgument { op: "div", .. }), "{g}");
    den[n - 5] = 3;
    assert_eq!(
        (&Tensor::<G, i32>::from_slice(&num, [n])? / &Tensor::<G, i32>::from_slice(&den, [n])?)?.to_vec()?,
        fine
    );
    Ok(())
}

#[test]
fn arange_and_fill_of_split_lengths_match_the_loop() -> locus::Result<()> {
    for n in [0, 1, 65_539, 131_073] {
        let want: Vec<f32> = (0..n).map(|i| (1.0 + i as f64 * 2.0) as f32).collect();
        let got = Tensor::<Cpu>::arange(1.0, 1.0 + 2.0 * n as f32, 2.0)?.to_vec()?;
        assert_eq!(bits(&got), bits(&want));
        assert_eq!(Tensor::<G>::full([n], 1.5)?.to_vec()?, vec![1.5; n]);
    }
    Ok(())
}
