//! The copy that puts a row-major tensor's dims in another order, as the backends run it:
//! dims of length 1 dropped and neighbouring dims that stay neighbours merged, then
//! classified, so that a permutation that moves nothing is a plain copy and one that swaps
//! the two inner blocks of elements is a (batched) matrix transpose; only what is left
//! takes the general strided copy.

use crate::error::{Error, Result};

/// The most dims, after merging, that the cuda backend's strided copy takes.
pub(crate) const MAX_DIMS: usize = 8;

/// A permutation of the dims of a row-major tensor into a new row-major tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Permute {
    /// The elements stay in order: a copy of `len` elements.
    Copy { len: usize },
    /// `batch` row-major `[rows, cols]` matrices one after another, each written as its
    /// `[cols, rows]` transpose.
    Transpose { batch: usize, rows: usize, cols: usize },
    /// The general case: the output's dims, outermost first, each as `(length, stride)`
    /// where stride is how far one step along it moves in the source, in elements.
    Strided { dims: Vec<(usize, usize)> },
}

impl Permute {
    /// Elements copied (those of the source and of the output).
    pub(crate) fn len(&self) -> usize {
        match self {
            Permute::Copy { len } => *len,
            Permute::Transpose { batch, rows, cols } => batch * rows * cols,
            Permute::Strided { dims } => dims.iter().map(|d| d.0).product(),
        }
    }

    /// The copy of a tensor of `shape` whose output dim `j` is input dim `perm[j]`.
    /// `perm` must be a permutation of `0..shape.len()` and the shape that of an existing
    /// tensor (its element count fits a `usize`).
    pub(crate) fn new(op: &'static str, shape: &[usize], perm: &[usize]) -> Result<Permute> {
        let mut seen = vec![false; shape.len()];
        for &p in perm {
            match seen.get_mut(p) {
                Some(s) if !*s => *s = true,
                _ => return Err(bad(op, shape, perm)),
            }
        }
        if perm.len() != shape.len() {
            return Err(bad(op, shape, perm));
        }
        let len = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or_else(|| bad(op, shape, perm))?;
        if len == 0 {
            return Ok(Permute::Copy { len: 0 });
        }
        // Row-major strides of the source; every product is at most `len`.
        let mut strides = vec![1usize; shape.len()];
        for i in (0..shape.len().saturating_sub(1)).rev() {
            strides[i] = strides[i + 1] * shape[i + 1];
        }
        let mut dims: Vec<(usize, usize)> = Vec::new();
        for &p in perm {
            let (n, s) = (shape[p], strides[p]);
            if n == 1 {
                continue;
            }
            match dims.last_mut() {
                // One step along the previous dim covers the whole of this one: one dim.
                Some(last) if last.1 == s * n => *last = (last.0 * n, s),
                _ => dims.push((n, s)),
            }
        }
        Ok(match dims[..] {
            [] | [_] => Permute::Copy { len },
            // Output [cols, rows] read down the columns of a [rows, cols] source.
            [(cols, 1), (rows, s)] if s == cols => Permute::Transpose { batch: 1, rows, cols },
            [(batch, sb), (cols, 1), (rows, s)] if s == cols && sb == rows * cols => {
                Permute::Transpose { batch, rows, cols }
            }
            _ => Permute::Strided { dims },
        })
    }
}

fn bad(op: &'static str, shape: &[usize], perm: &[usize]) -> Error {
    Error::InvalidArgument { op, reason: format!("{perm:?} is not an order of the dims of shape {shape:?}") }
}

#[cfg(test)]
mod tests {
    use crate::backend::api::permute::*;

    fn p(shape: &[usize], perm: &[usize]) -> Permute {
        Permute::new("test", shape, perm).expect("a permutation")
    }

    #[test]
    fn orders_that_move_nothing_are_copies() {
        assert_eq!(p(&[2, 3, 4], &[0, 1, 2]), Permute::Copy { len: 24 });
        assert_eq!(p(&[2, 3, 4], &[2, 1, 0]).len(), 24);
        assert_eq!(p(&[2, 3, 4], &[0, 2, 1]).len(), 24);
        assert_eq!(p(&[2, 1, 4], &[1, 0, 2]), Permute::Copy { len: 8 }, "a dim of length 1 moved");
        assert_eq!(p(&[], &[]), Permute::Copy { len: 1 });
        assert_eq!(p(&[3, 0, 5], &[2, 1, 0]), Permute::Copy { len: 0 });
    }

    #[test]
    fn swapping_the_two_inner_blocks_is_a_batched_transpose() {
        assert_eq!(p(&[2, 3], &[1, 0]), Permute::Transpose { batch: 1, rows: 2, cols: 3 });
        assert_eq!(p(&[5, 2, 3], &[0, 2, 1]), Permute::Transpose { batch: 5, rows: 2, cols: 3 });
        // [a, b, c, d] with (b) and (c, d) swapped: rows b, cols c * d.
        assert_eq!(p(&[2, 3, 4, 5], &[0, 2, 3, 1]), Permute::Transpose { batch: 2, rows: 3, cols: 20 });
        // Outer dims merge into the batch.
        assert_eq!(p(&[2, 7, 3, 4], &[0, 1, 3, 2]), Permute::Transpose { batch: 14, rows: 3, cols: 4 });
        // Swapping dims 0 and 2 of [a, 1, c]: a plain transpose.
        assert_eq!(p(&[3, 1, 4], &[2, 1, 0]), Permute::Transpose { batch: 1, rows: 3, cols: 4 });
    }

    #[test]
    fn other_orders_are_strided_copies() {
        // [2, 3, 4] -> [3, 2, 4]: the inner runs of 4 stay together.
        assert_eq!(p(&[2, 3, 4], &[1, 0, 2]), Permute::Strided { dims: vec![(3, 4), (2, 12), (4, 1)] });
        // [2, 3, 4] -> [4, 3, 2].
        assert_eq!(p(&[2, 3, 4], &[2, 1, 0]), Permute::Strided { dims: vec![(4, 1), (3, 4), (2, 12)] });
    }

    #[test]
    fn a_list_that_is_no_order_of_the_dims_is_an_error() {
        for perm in [&[0, 0][..], &[0], &[0, 2], &[0, 1, 2]] {
            assert!(matches!(Permute::new("t", &[2, 3], perm), Err(Error::InvalidArgument { op: "t", .. })));
        }
    }
}
