//! The host backend's loops for comparisons (`u8` results), `where` and `argmax` over one
//! dim, generic over the element type and split over the worker pool as the loops of
//! the other kernels are (each output element computed as on one thread, so the results do
//! not depend on the split).

use crate::backend::host::kernels::GRAIN;
use crate::backend::workers::split_mut;
use crate::backend::CompareOp;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::shape::{Layout, Reduction};

/// Calls `f(k, offsets)` for output elements `start..start + n` of a broadcast over
/// `shape`, `offsets[j]` being the element of operand `j`, whose strides over `shape` are
/// `strides[j]`: an odometer over the output index that moves every offset with it.
fn walk<const K: usize>(
    shape: &[usize],
    strides: [&[usize]; K],
    start: usize,
    n: usize,
    mut f: impl FnMut(usize, [usize; K]),
) {
    if n == 0 {
        // An empty output may have a dim of 0, which no index divides by.
        return;
    }
    let rank = shape.len();
    let mut idx = vec![0usize; rank];
    let mut off = [0usize; K];
    let mut rest = start;
    for d in (0..rank).rev() {
        idx[d] = rest % shape[d];
        rest /= shape[d];
        for (o, s) in off.iter_mut().zip(&strides) {
            *o += idx[d] * s[d];
        }
    }
    for k in 0..n {
        f(k, off);
        for d in (0..rank).rev() {
            idx[d] += 1;
            if idx[d] < shape[d] {
                for (o, s) in off.iter_mut().zip(&strides) {
                    *o += s[d];
                }
                break;
            }
            for (o, s) in off.iter_mut().zip(&strides) {
                *o -= s[d] * (idx[d] - 1);
            }
            idx[d] = 0;
        }
    }
}

/// The comparison as a function, chosen once per kernel rather than per element.
fn predicate<T: Element>(op: CompareOp) -> fn(T, T) -> bool {
    match op {
        CompareOp::Eq => |a, b| a == b,
        CompareOp::Ne => |a, b| a != b,
        CompareOp::Lt => |a, b| a < b,
        CompareOp::Le => |a, b| a <= b,
        CompareOp::Gt => |a, b| a > b,
        CompareOp::Ge => |a, b| a >= b,
    }
}

/// `l op r` as 1 or 0 into `out`, an `out_shape` result, the operands lined up by
/// `layout`. IEEE: NaN compares false except under `Ne`.
pub(in crate::backend) fn compare<T: Element>(
    op: CompareOp,
    l: &[T],
    r: &[T],
    out: &mut [u8],
    out_shape: &[usize],
    layout: &Layout,
) -> Result<()> {
    let p = predicate::<T>(op);
    split_mut(out, 1, GRAIN, &|start, out| {
        match layout {
            Layout::Same => {
                let (l, r) = (&l[start.min(l.len())..], &r[start.min(r.len())..]);
                out.iter_mut().zip(l.iter().zip(r)).for_each(|(o, (&a, &b))| *o = u8::from(p(a, b)));
            }
            Layout::RhsScalar => {
                out.iter_mut().zip(&l[start.min(l.len())..]).for_each(|(o, &a)| *o = u8::from(p(a, r[0])))
            }
            Layout::LhsScalar => {
                out.iter_mut().zip(&r[start.min(r.len())..]).for_each(|(o, &b)| *o = u8::from(p(l[0], b)))
            }
            Layout::Strided { lhs, rhs } => {
                walk(out_shape, [lhs, rhs], start, out.len(), |k, [i, j]| out[k] = u8::from(p(l[i], r[j])))
            }
        }
        Ok(())
    })
}

/// `a` where `mask` is not 0, else `b`, into `out`, an `out_shape` result; `strides` are
/// the mask's, `a`'s and `b`'s over `out_shape` (0 where broadcast).
pub(in crate::backend) fn select_where<T: Element>(
    mask: &[u8],
    a: &[T],
    b: &[T],
    out: &mut [T],
    out_shape: &[usize],
    strides: &[Vec<usize>; 3],
) -> Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    // All three of the output's shape: element i of each.
    let same = {
        let mut s = vec![1usize; out_shape.len()];
        for d in (0..out_shape.len().saturating_sub(1)).rev() {
            s[d] = s[d + 1] * out_shape[d + 1];
        }
        let dense: Vec<usize> = s.iter().zip(out_shape).map(|(&st, &n)| if n == 1 { 0 } else { st }).collect();
        strides.iter().all(|st| *st == dense)
    };
    split_mut(out, 1, GRAIN, &|start, out| {
        if same {
            let end = start + out.len();
            let it = mask[start..end].iter().zip(&a[start..end]).zip(&b[start..end]);
            out.iter_mut().zip(it).for_each(|(o, ((&m, &x), &y))| *o = if m != 0 { x } else { y });
        } else {
            let [sm, sa, sb] = strides;
            walk(out_shape, [sm, sa, sb], start, out.len(), |k, [i, j, l]| {
                out[k] = if mask[i] != 0 { a[j] } else { b[l] }
            });
        }
        Ok(())
    })
}

/// Whether `v`, seen after `best`, replaces it as the running maximum: NaN wins and the
/// first NaN stays; otherwise only a strictly larger value does, so ties keep the first.
fn beats<T: Element>(v: T, best: T) -> bool {
    let nan = |x: T| x.partial_cmp(&x).is_none();
    !nan(best) && (nan(v) || v > best)
}

/// The index of the first maximum (NaN wins) over the dim `r` describes, for each output.
pub(in crate::backend) fn argmax<T: Element>(x: &[T], out: &mut [i32], r: Reduction) -> Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    if r.len == 0 || r.len > i32::MAX as usize {
        return Err(Error::InvalidArgument {
            op: "argmax",
            reason: format!("a reduction over {} elements (needs 1 to i32::MAX)", r.len),
        });
    }
    let per_output = (GRAIN / r.len).max(1);
    split_mut(out, 1, per_output, &|start, out| {
        if r.inner == 1 {
            for (o, row) in out.iter_mut().zip(x[start * r.len..].chunks(r.len)) {
                let (mut best, mut at) = (row[0], 0);
                for (j, &v) in row.iter().enumerate().skip(1) {
                    if beats(v, best) {
                        (best, at) = (v, j);
                    }
                }
                *o = at as i32;
            }
            return Ok(());
        }
        // Runs of outputs that share `o` and read `n` neighbouring elements per step.
        let mut done = 0;
        while done < out.len() {
            let (o, i0) = ((start + done) / r.inner, (start + done) % r.inner);
            let n = (r.inner - i0).min(out.len() - done);
            let run = |j: usize| &x[(o * r.len + j) * r.inner + i0..][..n];
            let dst = &mut out[done..done + n];
            dst.fill(0);
            let mut best = run(0).to_vec();
            for j in 1..r.len {
                for ((d, b), &v) in dst.iter_mut().zip(best.iter_mut()).zip(run(j)) {
                    if beats(v, *b) {
                        (*b, *d) = (v, j as i32);
                    }
                }
            }
            done += n;
        }
        Ok(())
    })
}

/// `out[o] = x` at index `idx[o]` along the dim `r` describes: the values of `max_dim`.
pub(in crate::backend) fn gather_along<T: Element>(x: &[T], idx: &[i32], out: &mut [T], r: Reduction) -> Result<()> {
    split_mut(out, 1, GRAIN, &|start, out| {
        for (k, o) in out.iter_mut().enumerate() {
            let p = start + k;
            let (a, b) = (p / r.inner, p % r.inner);
            let at = idx.get(p).and_then(|&j| usize::try_from(j).ok()).filter(|&j| j < r.len);
            *o = match at.and_then(|j| x.get((a * r.len + j) * r.inner + b)) {
                Some(&v) => v,
                None => {
                    return Err(Error::InvalidArgument {
                        op: "max_dim",
                        reason: format!("index {:?} out of range for a dim of {}", idx.get(p), r.len),
                    })
                }
            };
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use crate::backend::host::kernels::select::*;

    #[test]
    fn walk_visits_broadcast_offsets_in_row_major_order() {
        let shape = [2, 3];
        let (a, b) = ([3usize, 1], [0usize, 1]);
        let mut seen = Vec::new();
        walk(&shape, [&a, &b], 0, 6, |k, [i, j]| seen.push((k, i, j)));
        assert_eq!(seen, vec![(0, 0, 0), (1, 1, 1), (2, 2, 2), (3, 3, 0), (4, 4, 1), (5, 5, 2)]);
        let mut tail = Vec::new();
        walk(&shape, [&a, &b], 4, 2, |_, [i, j]| tail.push((i, j)));
        assert_eq!(tail, vec![(4, 1), (5, 2)]);
        let mut scalar = Vec::new();
        walk(&[], [&[][..]], 0, 1, |k, [i]| scalar.push((k, i)));
        assert_eq!(scalar, vec![(0, 0)]);
    }

    #[test]
    fn argmax_keeps_the_first_maximum_and_the_first_nan() {
        let x = [1.0f32, 3.0, 3.0, f32::NAN, 2.0, f32::NAN];
        let mut out = [0i32; 1];
        argmax(&x, &mut out, Reduction { outer: 1, len: 6, inner: 1 }).unwrap();
        assert_eq!(out, [3]);
        argmax(&x[..3], &mut out, Reduction { outer: 1, len: 3, inner: 1 }).unwrap();
        assert_eq!(out, [1]);
        let z = [-0.0f64, 0.0];
        argmax(&z, &mut out, Reduction { outer: 1, len: 2, inner: 1 }).unwrap();
        assert_eq!(out, [0], "-0.0 and 0.0 tie");
        // Columns: [2, 3] over dim 0.
        let c = [1i32, 5, 2, 1, 5, 3];
        let mut cols = [9i32; 3];
        argmax(&c, &mut cols, Reduction { outer: 1, len: 2, inner: 3 }).unwrap();
        assert_eq!(cols, [0, 0, 1]);
    }
}
