//! Shape arithmetic: element counts, broadcasting, reduction splits.

use crate::error::{Error, Result};

/// The element count of `shape`, or an error if it overflows `usize`.
pub(crate) fn numel(op: &'static str, shape: &[usize]) -> Result<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).ok_or_else(|| Error::InvalidArgument {
        op,
        reason: format!("shape {shape:?} has more elements than fit in memory"),
    })
}

/// Contiguous (row-major) strides of `shape`, in elements.
pub(crate) fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// How the two operands of an elementwise binary op line up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Layout {
    /// Same shape: element i with element i.
    Same,
    /// The rhs has one element, applied to every lhs element.
    RhsScalar,
    /// The lhs has one element, applied to every rhs element.
    LhsScalar,
    /// General broadcasting: per-operand strides over the output shape, 0 where the
    /// operand is broadcast.
    Strided { lhs: Vec<usize>, rhs: Vec<usize> },
}

/// The output shape and layout of `lhs ∘ rhs` under NumPy broadcasting.
pub(crate) fn broadcast(op: &'static str, lhs: &[usize], rhs: &[usize]) -> Result<(Vec<usize>, Layout)> {
    if lhs == rhs {
        return Ok((lhs.to_vec(), Layout::Same));
    }
    let rank = lhs.len().max(rhs.len());
    let pad = |s: &[usize]| {
        let mut v = vec![1; rank - s.len()];
        v.extend_from_slice(s);
        v
    };
    let (l, r) = (pad(lhs), pad(rhs));
    let mut out = Vec::with_capacity(rank);
    for (&a, &b) in l.iter().zip(&r) {
        out.push(match (a, b) {
            _ if a == b => a,
            (1, _) => b,
            (_, 1) => a,
            _ => {
                return Err(Error::ShapeMismatch { op, lhs: lhs.to_vec(), rhs: rhs.to_vec() });
            }
        });
    }
    let n_out = numel(op, &out)?;
    let (nl, nr) = (l.iter().product::<usize>(), r.iter().product::<usize>());
    let layout = if nr == 1 && nl == n_out {
        Layout::RhsScalar
    } else if nl == 1 && nr == n_out {
        Layout::LhsScalar
    } else {
        let bstrides =
            |s: &[usize]| strides(s).into_iter().zip(s).map(|(st, &d)| if d == 1 { 0 } else { st }).collect();
        Layout::Strided { lhs: bstrides(&l), rhs: bstrides(&r) }
    };
    Ok((out, layout))
}

/// A reduction over one dim, seen as `[outer, len, inner]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Reduction {
    pub outer: usize,
    pub len: usize,
    pub inner: usize,
}

impl Reduction {
    /// A reduction of all `n` elements to one.
    pub fn all(n: usize) -> Self {
        Reduction { outer: 1, len: n, inner: 1 }
    }

    /// A reduction over `dim` of `shape`.
    pub fn over(shape: &[usize], dim: usize) -> Self {
        Reduction { outer: shape[..dim].iter().product(), len: shape[dim], inner: shape[dim + 1..].iter().product() }
    }

    /// The number of outputs.
    pub fn out_len(&self) -> usize {
        self.outer * self.inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcast_rows_and_columns() {
        let (out, layout) = broadcast("add", &[2, 3], &[3]).unwrap();
        assert_eq!(out, vec![2, 3]);
        assert_eq!(layout, Layout::Strided { lhs: vec![3, 1], rhs: vec![0, 1] });
        let (out, _) = broadcast("add", &[2, 1], &[1, 4]).unwrap();
        assert_eq!(out, vec![2, 4]);
        assert_eq!(broadcast("add", &[4], &[]).unwrap().1, Layout::RhsScalar);
        assert_eq!(broadcast("add", &[1, 1], &[5]).unwrap(), (vec![1, 5], Layout::LhsScalar));
    }

    #[test]
    fn broadcast_rejects_incompatible_dims() {
        let e = broadcast("mul", &[2, 3], &[4]).unwrap_err();
        assert_eq!(e, Error::ShapeMismatch { op: "mul", lhs: vec![2, 3], rhs: vec![4] });
    }

    #[test]
    fn numel_overflow_is_an_error() {
        assert!(numel("zeros", &[usize::MAX, 2]).is_err());
        assert_eq!(numel("zeros", &[]).unwrap(), 1);
    }
}
