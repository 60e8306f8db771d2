//! The host backend's copy of a tensor with its dims in another order ([`Permute`]): a
//! copy, batched tiled transposes, or a strided gather that walks the output in order,
//! each split over the worker pool like the other host kernels. Every output element is
//! written once, from one source element: bit-identical whatever the split.

use crate::backend::host::kernels::GRAIN;
use crate::backend::workers::split_mut;
use crate::backend::Permute;
use crate::element::Element;
use crate::error::{Error, Result};

/// `out` made the permuted copy of `x` that `p` describes.
pub(in crate::backend) fn permute<T: Element>(x: &[T], out: &mut [T], p: &Permute) -> Result<()> {
    if x.len() != out.len() {
        return Err(Error::InvalidArgument {
            op: "transpose",
            reason: format!("{} elements into {}", x.len(), out.len()),
        });
    }
    if out.is_empty() {
        return Ok(());
    }
    match p {
        Permute::Copy { .. } => split_mut(out, 1, GRAIN, &|start, o| {
            o.copy_from_slice(&x[start..start + o.len()]);
            Ok(())
        }),
        &Permute::Transpose { batch, rows, cols } => batched_transpose(x, out, batch, rows, cols),
        Permute::Strided { dims } => strided(x, out, dims),
    }
}

/// `batch` `[rows, cols]` matrices each transposed: a large one split over the pool on its
/// own, small ones whole matrices to a thread.
fn batched_transpose<T: Element>(x: &[T], out: &mut [T], batch: usize, rows: usize, cols: usize) -> Result<()> {
    let size = rows * cols;
    if batch.checked_mul(size) != Some(out.len()) {
        return Err(Error::InvalidArgument {
            op: "transpose",
            reason: format!("{batch} matrices of [{rows}, {cols}] in {} elements", out.len()),
        });
    }
    if size >= GRAIN {
        for (o, m) in out.chunks_mut(size).zip(x.chunks(size)) {
            transpose(m, o, rows, cols)?;
        }
        return Ok(());
    }
    split_mut(out, size, (GRAIN / size).max(1), &|start, o| {
        for (i, o) in o.chunks_mut(size).enumerate() {
            let at = start + i * size;
            transpose_serial(&x[at..at + size], o, rows, cols);
        }
        Ok(())
    })
}

/// One `[rows, cols]` matrix transposed on this thread, in tiles.
fn transpose_serial<T: Element>(x: &[T], out: &mut [T], rows: usize, cols: usize) {
    const TILE: usize = 32;
    for jt in (0..cols).step_by(TILE) {
        for it in (0..rows).step_by(TILE) {
            for i in it..(it + TILE).min(rows) {
                for j in jt..(jt + TILE).min(cols) {
                    out[j * rows + i] = x[i * cols + j];
                }
            }
        }
    }
}

/// The `[rows, cols]` matrix `x` as `[cols, rows]`, in tiles, output rows split over the pool.
pub(in crate::backend) fn transpose<T: Element>(x: &[T], out: &mut [T], rows: usize, cols: usize) -> Result<()> {
    const TILE: usize = 32;
    if out.is_empty() {
        return Ok(());
    }
    split_mut(out, rows, (GRAIN / rows).max(1), &|start, out| {
        let (j0, nj) = (start / rows, out.len() / rows);
        for jt in (0..nj).step_by(TILE) {
            for it in (0..rows).step_by(TILE) {
                for i in it..(it + TILE).min(rows) {
                    for j in jt..(jt + TILE).min(nj) {
                        out[j * rows + i] = x[i * cols + j0 + j];
                    }
                }
            }
        }
        Ok(())
    })
}

/// The output in order, each run along its innermost dim read from the source at that
/// dim's stride (a slice copy where the stride is 1); runs split over the pool.
fn strided<T: Element>(x: &[T], out: &mut [T], dims: &[(usize, usize)]) -> Result<()> {
    let Some((&(inner, inner_stride), outer)) = dims.split_last() else {
        return Err(Error::InvalidArgument { op: "transpose", reason: "a strided copy of no dims".into() });
    };
    split_mut(out, inner, (GRAIN / inner).max(1), &|start, o| {
        // An odometer over the outer dims, started at this part's first run.
        let mut idx = vec![0usize; outer.len()];
        let (mut src, mut rest) = (0usize, start / inner);
        for (d, &(n, s)) in outer.iter().enumerate().rev() {
            idx[d] = rest % n;
            rest /= n;
            src += idx[d] * s;
        }
        for run in o.chunks_mut(inner) {
            if inner_stride == 1 {
                run.copy_from_slice(&x[src..src + inner]);
            } else {
                for (i, v) in run.iter_mut().enumerate() {
                    *v = x[src + i * inner_stride];
                }
            }
            for (d, &(n, s)) in outer.iter().enumerate().rev() {
                idx[d] += 1;
                src += s;
                if idx[d] < n {
                    break;
                }
                src -= s * n;
                idx[d] = 0;
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The permuted copy by its definition: every output index mapped back to the input.
    fn reference(x: &[i32], shape: &[usize], perm: &[usize]) -> Vec<i32> {
        let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
        let n: usize = shape.iter().product();
        (0..n)
            .map(|mut i| {
                let mut idx = vec![0; shape.len()];
                for d in (0..out_shape.len()).rev() {
                    idx[perm[d]] = i % out_shape[d];
                    i /= out_shape[d];
                }
                let src = idx.iter().zip(shape).fold(0, |a, (&i, &n)| a * n + i);
                x[src]
            })
            .collect()
    }

    #[test]
    fn every_kind_of_permutation_matches_the_definition() {
        let cases: &[(&[usize], &[usize])] = &[
            (&[2, 3, 4], &[1, 0, 2]),
            (&[2, 3, 4], &[2, 1, 0]),
            (&[2, 3, 4], &[0, 2, 1]),
            (&[3, 1, 5, 2], &[3, 1, 2, 0]),
            (&[4, 5], &[1, 0]),
            (&[4, 5], &[0, 1]),
            (&[200, 300], &[1, 0]),
            (&[3, 2, 70, 90], &[0, 1, 3, 2]),
            (&[6, 40, 50, 7], &[2, 1, 0, 3]),
        ];
        for &(shape, perm) in cases {
            let n: usize = shape.iter().product();
            let x: Vec<i32> = (0..n as i32).collect();
            let p = Permute::new("test", shape, perm).expect("a permutation");
            let mut out = vec![-1; n];
            permute(&x, &mut out, &p).expect("permute");
            assert_eq!(out, reference(&x, shape, perm), "{shape:?} by {perm:?} ({p:?})");
        }
    }
}
