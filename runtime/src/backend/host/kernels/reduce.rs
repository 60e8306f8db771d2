//! Sums, means, maxima and sums of squares over all elements or one dim (reduce.cu):
//! floats accumulated in f64 in lanes and per-thread partials added in a fixed order.

use crate::backend::host::kernels::init::fill;
use crate::backend::host::kernels::GRAIN;
use crate::backend::workers::split_mut;
use crate::backend::ReduceKind;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::shape::Reduction;

/// The f64 sum of `x` (of its squares with `SQ`) in sixteen lanes, added pairwise; with
/// AVX2 where the processor has it (the same additions in the same order, so the same
/// result, four at a time).
fn sum_f64<T: Element, const SQ: bool>(x: &[T]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the processor has AVX2, checked on the line above.
        return unsafe { sum_f64_avx2::<T, SQ>(x) };
    }
    sum_lanes::<T, SQ>(x)
}

/// An element as the sum adds it: itself, or with `SQ` its square (in f64).
#[inline(always)]
fn term<T: Element, const SQ: bool>(v: T) -> f64 {
    let v = v.to_f64();
    if SQ {
        v * v
    } else {
        v
    }
}

/// [`sum_lanes`] compiled for AVX2.
///
/// # Safety
/// The processor must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum_f64_avx2<T: Element, const SQ: bool>(x: &[T]) -> f64 {
    sum_lanes::<T, SQ>(x)
}

/// Sixteen independent f64 sums (which the compiler vectorizes), then added pairwise.
/// Lanes start at -0.0, the neutral element, as `Iterator::sum` of f64 does.
#[inline(always)]
fn sum_lanes<T: Element, const SQ: bool>(x: &[T]) -> f64 {
    let mut lanes = [-0.0f64; 16];
    let mut runs = x.chunks_exact(16);
    for run in &mut runs {
        for (s, v) in lanes.iter_mut().zip(run) {
            *s += term::<T, SQ>(*v);
        }
    }
    for (s, v) in lanes.iter_mut().zip(runs.remainder()) {
        *s += term::<T, SQ>(*v);
    }
    let mut width = 16;
    while width > 1 {
        width /= 2;
        for i in 0..width {
            lanes[i] += lanes[i + width];
        }
    }
    lanes[0]
}

/// A reduction's running value: an f64 sum for floats, else an element.
#[derive(Clone, Copy)]
enum Acc<T> {
    Float(f64),
    Elem(T),
}

/// `op` over one contiguous row (not empty).
fn reduce_row<T: Element>(op: ReduceKind, x: &[T]) -> Acc<T> {
    match op {
        ReduceKind::Max => Acc::Elem(x[1..].iter().fold(x[0], |m, &v| m.max_of(v))),
        ReduceKind::SumSquares => Acc::Float(sum_f64::<T, true>(x)),
        _ if T::DTYPE.is_float() => Acc::Float(sum_f64::<T, false>(x)),
        _ => Acc::Elem(x.iter().fold(T::ZERO, |s, &v| s.add(v))),
    }
}

/// Two partial results of `op`, the earlier one first.
fn combine<T: Element>(op: ReduceKind, a: Acc<T>, b: Acc<T>) -> Acc<T> {
    match (a, b) {
        (Acc::Float(a), Acc::Float(b)) => Acc::Float(a + b),
        (Acc::Elem(a), Acc::Elem(b)) if op == ReduceKind::Max => Acc::Elem(a.max_of(b)),
        (Acc::Elem(a), Acc::Elem(b)) => Acc::Elem(a.add(b)),
        (a, _) => a, // one op gives one kind of partial
    }
}

fn finish<T: Element>(op: ReduceKind, a: Acc<T>, len: usize) -> T {
    match a {
        Acc::Float(s) => T::from_f64(if op == ReduceKind::Mean { s / len as f64 } else { s }),
        Acc::Elem(v) => v,
    }
}

pub(in crate::backend) fn reduce<T: Element>(op: ReduceKind, x: &[T], out: &mut [T], r: Reduction) -> Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    if r.len == 0 {
        // A sum of nothing is the neutral element (-0.0 for floats, as `Iterator::sum`
        // gives; a mean of nothing is then NaN); the tensor layer refuses `max`.
        return match op {
            ReduceKind::Max => Err(Error::InvalidArgument { op: "max", reason: "a reduction over nothing".into() }),
            _ if T::DTYPE.is_float() => fill(out, finish(op, Acc::Float(-0.0), 0)),
            _ => fill(out, T::ZERO),
        };
    }
    let per_output = (GRAIN / r.len).max(1);
    if r.inner > 1 {
        return split_mut(out, 1, per_output, &|start, out| reduce_strided(op, x, out, start, r));
    }
    if r.outer > 1 || r.len < 2 * GRAIN {
        return split_mut(out, 1, per_output, &|start, out| {
            for (o, row) in out.iter_mut().zip(x[start * r.len..].chunks(r.len)) {
                *o = finish(op, reduce_row(op, row), r.len);
            }
            Ok(())
        });
    }
    // One long row: a partial result per thread, combined in order.
    let mut partials: Vec<Option<Acc<T>>> = vec![None; crate::backend::workers::host_threads().min(r.len / GRAIN)];
    let per = r.len.div_ceil(partials.len());
    split_mut(&mut partials, 1, 1, &|start, parts| {
        for (k, p) in parts.iter_mut().enumerate() {
            let from = (start + k) * per;
            *p = x.get(from..(from + per).min(r.len)).filter(|s| !s.is_empty()).map(|s| reduce_row(op, s));
        }
        Ok(())
    })?;
    let total = partials.into_iter().flatten().reduce(|a, b| combine(op, a, b));
    out[0] = total.map_or(T::ZERO, |t| finish(op, t, r.len));
    Ok(())
}

/// Outputs `start..start + out.len()` of a reduction over a dim that is not the last:
/// per output the sequential order over the reduced dim, reading whole runs of `inner`.
fn reduce_strided<T: Element>(op: ReduceKind, x: &[T], out: &mut [T], start: usize, r: Reduction) -> Result<()> {
    let mut done = 0;
    while done < out.len() {
        let (o, i0) = ((start + done) / r.inner, (start + done) % r.inner);
        let n = (r.inner - i0).min(out.len() - done);
        let run = |j: usize| &x[(o * r.len + j) * r.inner + i0..][..n];
        let dst = &mut out[done..done + n];
        if op != ReduceKind::Max && T::DTYPE.is_float() {
            let mut acc = vec![-0.0f64; n];
            let square = op == ReduceKind::SumSquares;
            for j in 0..r.len {
                acc.iter_mut()
                    .zip(run(j))
                    .for_each(|(s, v)| *s += if square { term::<T, true>(*v) } else { v.to_f64() });
            }
            dst.iter_mut().zip(acc).for_each(|(d, s)| *d = finish(op, Acc::Float(s), r.len));
        } else {
            // Max starts from the first element, an integer sum from zero, as a fold does.
            let first = if op == ReduceKind::Max {
                dst.copy_from_slice(run(0));
                1
            } else {
                dst.fill(T::ZERO);
                0
            };
            for j in first..r.len {
                for (d, &v) in dst.iter_mut().zip(run(j)) {
                    *d = if op == ReduceKind::Max { d.max_of(v) } else { d.add(v) };
                }
            }
        }
        done += n;
    }
    Ok(())
}
