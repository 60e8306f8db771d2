//! The host backend's row ops: softmax and log-softmax over one dim, cross-entropy's loss
//! per row, LayerNorm of rows and its gradients. Like the other kernels, each splits its output over the
//! worker pool (`split_mut`) in whole rows, so every output is computed as on one thread.
//!
//! Softmax is computed in f64 whatever the float type, in two passes per row (the
//! maximum, NaN winning, then the sum of `exp(x - max)`), and rounded once: the most
//! accurate of the backends' answers, which the GPU's single-pass f32 kernels are
//! checked against. The special values follow from that arithmetic: a `-inf` entry
//! gives 0 (log-softmax `-inf`), and a row of only `-inf`, or holding `+inf` or NaN, is
//! NaN throughout, as in PyTorch.
//!
//! Targets (`cross_entropy`) are all checked before
//! anything is written, in order, so the error names the first bad one, as the GPU's
//! check does.

use crate::backend::host::kernels::GRAIN;
use crate::backend::workers::split_mut;
use crate::backend::{bad_target, SoftmaxOp};
use crate::element::Float;
use crate::error::Result;
use crate::shape::Reduction;

/// The larger of two values; NaN wins, as in `torch.max`.
fn max_nan(a: f64, b: f64) -> f64 {
    if a.is_nan() || a >= b {
        a
    } else {
        b
    }
}

/// One output of (log-)softmax from `x`, the maximum `m` of its slice and the sum `s` of
/// `exp(x - m)` over it.
fn finish(op: SoftmaxOp, x: f64, m: f64, s: f64) -> f64 {
    match op {
        SoftmaxOp::Softmax => (x - m).exp() / s,
        SoftmaxOp::LogSoftmax => x - m - s.ln(),
    }
}

/// The maximum of `row` (not empty) and the sum of `exp(x - max)` over it.
fn row_stats<T: Float>(row: &[T]) -> (f64, f64) {
    let m = row.iter().fold(f64::NEG_INFINITY, |m, v| max_nan(m, v.to_f64()));
    let s = row.iter().map(|v| (v.to_f64() - m).exp()).sum();
    (m, s)
}

/// `op` over the dim `r` describes, of `x` into `out` (both `r.outer * r.len * r.inner`
/// elements).
pub(in crate::backend) fn softmax<T: Float>(op: SoftmaxOp, x: &[T], out: &mut [T], r: Reduction) -> Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    // A part holds whole slices: rows of `len` (inner == 1), else blocks of `len * inner`.
    let unit = r.len * r.inner;
    split_mut(out, unit, (GRAIN / unit).max(1), &|start, out| {
        let x = &x[start..start + out.len()];
        if r.inner == 1 {
            for (row, o) in x.chunks(r.len).zip(out.chunks_mut(r.len)) {
                let (m, s) = row_stats(row);
                o.iter_mut().zip(row).for_each(|(o, v)| *o = T::from_f64(finish(op, v.to_f64(), m, s)));
            }
            return Ok(());
        }
        // Each block is `[len, inner]`: the slices are its columns, walked a row at a time.
        let (mut m, mut s) = (vec![0.0f64; r.inner], vec![0.0f64; r.inner]);
        for (block, o) in x.chunks(unit).zip(out.chunks_mut(unit)) {
            m.fill(f64::NEG_INFINITY);
            s.fill(0.0);
            for run in block.chunks(r.inner) {
                m.iter_mut().zip(run).for_each(|(m, v)| *m = max_nan(*m, v.to_f64()));
            }
            for run in block.chunks(r.inner) {
                s.iter_mut().zip(run).zip(&m).for_each(|((s, v), m)| *s += (v.to_f64() - m).exp());
            }
            for (run, o) in block.chunks(r.inner).zip(o.chunks_mut(r.inner)) {
                for (((o, v), m), s) in o.iter_mut().zip(run).zip(&m).zip(&s) {
                    *o = T::from_f64(finish(op, v.to_f64(), *m, *s));
                }
            }
        }
        Ok(())
    })
}

/// Cross-entropy's loss of each row of the `[out.len(), classes]` logits `x`:
/// `log(sum(exp(row))) - row[target]`, computed as `max + log(sum(exp(row - max)))`.
pub(in crate::backend) fn cross_entropy_rows<T: Float>(
    x: &[T],
    targets: &[i32],
    out: &mut [T],
    classes: usize,
) -> Result<()> {
    for (row, &t) in targets.iter().enumerate() {
        if usize::try_from(t).map_or(true, |t| t >= classes) {
            return Err(bad_target(row, t.into(), classes));
        }
    }
    split_mut(out, 1, (GRAIN / classes.max(1)).max(1), &|start, out| {
        for (k, o) in out.iter_mut().enumerate() {
            let row = start + k;
            let p = &x[row * classes..(row + 1) * classes];
            let (m, s) = row_stats(p);
            // Checked above: 0 <= target < classes.
            let t = targets[row] as usize;
            *o = T::from_f64(m + s.ln() - p[t].to_f64());
        }
        Ok(())
    })
}

/// The gradient of [`cross_entropy_rows`] with respect to the logits `x`, given each row's
/// loss's gradient `g`: `(softmax(row) - onehot(target)) * g[row]` into `out` (`x`'s
/// length), in f64, rounded once. A target out of range (the forward checked them) matches
/// no class.
pub(in crate::backend) fn cross_entropy_back<T: Float>(
    x: &[T],
    targets: &[i32],
    g: &[T],
    out: &mut [T],
    classes: usize,
) -> Result<()> {
    each_row(out, classes, |at, o| {
        let row = at / classes;
        let p = &x[at..at + classes];
        let (m, s) = row_stats(p);
        let (t, gr) = (usize::try_from(targets[row]).ok(), g[row].to_f64());
        for (j, (o, v)) in o.iter_mut().zip(p).enumerate() {
            let hit = if t == Some(j) { 1.0 } else { 0.0 };
            *o = T::from_f64(((v.to_f64() - m).exp() / s - hit) * gr);
        }
    })
}

/// The mean and `1 / sqrt(var + eps)` of `row` (not empty), in f64, the variance biased.
fn moments<T: Float>(row: &[T], eps: f64) -> (f64, f64) {
    let n = row.len() as f64;
    let mean = row.iter().map(|v| v.to_f64()).sum::<f64>() / n;
    let var = row.iter().map(|v| (v.to_f64() - mean).powi(2)).sum::<f64>() / n;
    (mean, 1.0 / (var + eps).sqrt())
}

/// `f(start, row)` for each row of `len` of `out` (its first element's index, its slice),
/// the rows split over the worker pool whole.
fn each_row<T: Float>(out: &mut [T], len: usize, f: impl Fn(usize, &mut [T]) + Sync) -> Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    split_mut(out, len, (GRAIN / len).max(1), &|start, out| {
        out.chunks_mut(len).enumerate().for_each(|(k, o)| f(start + k * len, o));
        Ok(())
    })
}

/// The gradient of softmax (or log-softmax) over rows of `len`, from its output `y` and
/// the gradient `g` of that output: `y (g - Σ g y)`, or `g - exp(y) Σ g`, in f64.
pub(in crate::backend) fn softmax_back<T: Float>(
    op: SoftmaxOp,
    y: &[T],
    g: &[T],
    out: &mut [T],
    len: usize,
) -> Result<()> {
    let log = op == SoftmaxOp::LogSoftmax;
    each_row(out, len, |at, o| {
        let (y, g) = (&y[at..at + len], &g[at..at + len]);
        let s: f64 = g.iter().zip(y).map(|(g, y)| if log { g.to_f64() } else { g.to_f64() * y.to_f64() }).sum();
        for ((o, y), g) in o.iter_mut().zip(y).zip(g) {
            let (y, g) = (y.to_f64(), g.to_f64());
            *o = T::from_f64(if log { g - y.exp() * s } else { y * (g - s) });
        }
    })
}

/// Each row of `len` of `x` normalised into `out` (`(x - mean) * rstd`), then with
/// `affine` times its weight plus its bias (`len` each). In f64, rounded once.
pub(in crate::backend) fn layer_norm<T: Float>(
    x: &[T],
    affine: Option<(&[T], &[T])>,
    out: &mut [T],
    len: usize,
    eps: f64,
) -> Result<()> {
    each_row(out, len, |at, o| {
        let row = &x[at..at + len];
        let (mean, rstd) = moments(row, eps);
        for (j, (o, v)) in o.iter_mut().zip(row).enumerate() {
            let xhat = (v.to_f64() - mean) * rstd;
            *o = T::from_f64(affine.map_or(xhat, |(w, b)| xhat * w[j].to_f64() + b[j].to_f64()));
        }
    })
}

/// The gradient of [`layer_norm`] with respect to `x`, given the gradient `g` of its
/// output: `rstd * (gw - mean(gw) - xhat * mean(gw * xhat))`, `gw = g * w` with the weight
/// `w`, else `g`. In f64, rounded once.
pub(in crate::backend) fn layer_norm_back<T: Float>(
    x: &[T],
    g: &[T],
    w: Option<&[T]>,
    out: &mut [T],
    len: usize,
    eps: f64,
) -> Result<()> {
    each_row(out, len, |at, o| {
        let row = &x[at..at + len];
        let (mean, rstd) = moments(row, eps);
        let xhat = |v: &T| (v.to_f64() - mean) * rstd;
        let gw = |j: usize| g[at + j].to_f64() * w.map_or(1.0, |w| w[j].to_f64());
        let n = len as f64;
        let sg = (0..len).map(gw).sum::<f64>() / n;
        let sgx = row.iter().enumerate().map(|(j, v)| gw(j) * xhat(v)).sum::<f64>() / n;
        for (j, (o, v)) in o.iter_mut().zip(row).enumerate() {
            *o = T::from_f64(rstd * (gw(j) - sg - xhat(v) * sgx));
        }
    })
}

/// The gradient of [`layer_norm`]'s weight (`bias` false: the sum over the rows of
/// `g * xhat`) or bias (the sum of `g`) into `out` (`len`), each column added in row order
/// in f64, rounded once.
pub(in crate::backend) fn layer_norm_param<T: Float>(
    x: &[T],
    g: &[T],
    bias: bool,
    out: &mut [T],
    len: usize,
    eps: f64,
) -> Result<()> {
    let mut sums = vec![0.0f64; len];
    for (row, grads) in x.chunks(len).zip(g.chunks(len)) {
        let (mean, rstd) = if bias { (0.0, 0.0) } else { moments(row, eps) };
        for ((s, v), g) in sums.iter_mut().zip(row).zip(grads) {
            *s += if bias { g.to_f64() } else { g.to_f64() * (v.to_f64() - mean) * rstd };
        }
    }
    out.iter_mut().zip(sums).for_each(|(o, s)| *o = T::from_f64(s));
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::backend::host::kernels::softmax::*;

    #[test]
    fn softmax_over_rows_and_columns_agrees_with_the_formula() {
        let x: Vec<f64> = (0..24).map(|i| (i as f64 * 0.7).sin() * 3.0).collect();
        // [2, 3, 4] over dim 1: outer 2, len 3, inner 4.
        let r = Reduction { outer: 2, len: 3, inner: 4 };
        let mut out = vec![0.0; 24];
        softmax(SoftmaxOp::Softmax, &x, &mut out, r).unwrap();
        for o in 0..2 {
            for i in 0..4 {
                let at = |j: usize| o * 12 + j * 4 + i;
                let total: f64 = (0..3).map(|j| x[at(j)].exp()).sum();
                for j in 0..3 {
                    assert!((out[at(j)] - x[at(j)].exp() / total).abs() < 1e-15);
                }
            }
        }
        let mut logs = vec![0.0; 24];
        softmax(SoftmaxOp::LogSoftmax, &x, &mut logs, Reduction { outer: 6, len: 4, inner: 1 }).unwrap();
        for row in 0..6 {
            let total: f64 = (0..4).map(|j| x[row * 4 + j].exp()).sum();
            for j in 0..4 {
                assert!((logs[row * 4 + j] - (x[row * 4 + j] - total.ln())).abs() < 1e-14);
            }
        }
    }

    #[test]
    fn a_bad_target_is_reported_before_anything_is_written() {
        let mut loss = vec![0.0f32; 2];
        let e = cross_entropy_rows(&[0.0f32; 4], &[1, -1], &mut loss, 2).unwrap_err();
        assert!(e.to_string().contains("target -1 of sample 1 is out of range for 2 classes"), "{e}");
    }
}
