//! Shape arithmetic: element counts, broadcasting, reduction splits.
//!
//! A tensor's shape is a [`Shape`], and [`Shape::new`] is the one way to make one: it
//! checks the dims with [`numel`], the one place an element count comes from. A checked
//! shape spans at most `isize::MAX` bytes even with its zero dims counted as 1, so every
//! product taken from it (strides, row sizes, reduction splits, byte counts) fits in
//! `usize`, and so do the sizes the backends compute from it. The helpers here still
//! compute with checked arithmetic: a wrong caller gets an `Err` naming its op, never a
//! wrapped size or a panic.

use std::ops::Deref;

use crate::element::DType;
use crate::error::{Error, Result};

/// The most bytes one buffer may span: Rust's limit for one allocation.
const MAX_BYTES: usize = isize::MAX as usize;

/// The element count of `shape` in `dtype`, or an error naming `op` and the shape.
///
/// A zero dim makes the count 0, but the other dims must still fit: with zeros counted
/// as 1, the dims times the element size may span at most `isize::MAX` bytes, as ndarray
/// and NumPy require. Otherwise an empty `[0, usize::MAX, 2]` would be a tensor whose
/// rows, strides and reductions overflow.
pub(crate) fn numel(op: &'static str, shape: &[usize], dtype: DType) -> Result<usize> {
    let span = shape.iter().try_fold(dtype.size(), |n, &d| n.checked_mul(d.max(1))).filter(|&b| b <= MAX_BYTES);
    match span {
        Some(_) if shape.contains(&0) => Ok(0),
        Some(bytes) => Ok(bytes / dtype.size()),
        None => Err(Error::InvalidArgument { op, reason: too_large(shape, dtype) }),
    }
}

fn too_large(shape: &[usize], dtype: DType) -> String {
    format!("shape {shape:?} is too large for {dtype}: its dims, a 0 counted as 1, span more than isize::MAX bytes")
}

/// The product of `dims`, or an error naming `op` if it overflows. Never fails for dims
/// taken from a checked [`Shape`].
pub(crate) fn product(op: &'static str, dims: &[usize]) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| Error::InvalidArgument { op, reason: format!("the dims {dims:?} multiply past usize::MAX") })
}

/// `a * b`, or an error naming `op` if it overflows.
pub(crate) fn mul(op: &'static str, a: usize, b: usize) -> Result<usize> {
    a.checked_mul(b).ok_or_else(|| Error::InvalidArgument { op, reason: format!("{a} * {b} overflows usize") })
}

/// Dims whose element count [`numel`] has checked: the only shape a tensor holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Shape {
    dims: Dims,
    numel: usize,
}

/// Ranks up to this keep their dims in place: an op's output shape is then made and
/// dropped without an allocation (issue 35: one `malloc` and one `free` fewer per op).
const INLINE: usize = 6;

/// The dims of a [`Shape`]: in place up to rank [`INLINE`], on the heap beyond.
#[derive(Clone)]
enum Dims {
    Inline { len: u8, dims: [usize; INLINE] },
    Heap(Box<[usize]>),
}

impl Dims {
    fn of(dims: &[usize]) -> Self {
        if dims.len() <= INLINE {
            let mut inline = [0; INLINE];
            inline[..dims.len()].copy_from_slice(dims);
            Dims::Inline { len: dims.len() as u8, dims: inline }
        } else {
            Dims::Heap(dims.into())
        }
    }

    fn as_slice(&self) -> &[usize] {
        match self {
            Dims::Inline { len, dims } => &dims[..*len as usize],
            Dims::Heap(dims) => dims,
        }
    }
}

/// Equal when the dims are, wherever they are kept.
impl PartialEq for Dims {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

impl Eq for Dims {}

/// As a list, like the `Vec` it stands for.
impl std::fmt::Debug for Dims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.as_slice().fmt(f)
    }
}

impl Shape {
    /// `dims` as a shape of `dtype` elements, checked.
    pub(crate) fn new(op: &'static str, dims: impl AsRef<[usize]>, dtype: DType) -> Result<Self> {
        let dims = dims.as_ref();
        let numel = numel(op, dims, dtype)?;
        Ok(Shape { dims: Dims::of(dims), numel })
    }

    /// The shape `dims` of the result of `op` on operands of shapes `inputs`, checked; the
    /// error names the operands too.
    pub(crate) fn result(op: &'static str, dims: Vec<usize>, dtype: DType, inputs: &[&[usize]]) -> Result<Self> {
        Shape::new(op, dims, dtype).map_err(|e| match e {
            Error::InvalidArgument { op, reason } => {
                Error::InvalidArgument { op, reason: format!("the result of {} would have {reason}", operands(inputs)) }
            }
            other => other,
        })
    }

    /// The shape of a 0-d tensor: one element.
    pub(crate) fn scalar() -> Self {
        Shape { dims: Dims::of(&[]), numel: 1 }
    }

    /// The number of elements.
    pub(crate) fn numel(&self) -> usize {
        self.numel
    }
}

/// The dims, outermost first.
impl Deref for Shape {
    type Target = [usize];

    fn deref(&self) -> &[usize] {
        self.dims.as_slice()
    }
}

/// Operand shapes for a message: `[2, 3] and [3, 4]`, the first four of a long list.
pub(crate) fn operands(inputs: &[&[usize]]) -> String {
    let mut s: Vec<String> = inputs.iter().take(4).map(|d| format!("{d:?}")).collect();
    if inputs.len() > 4 {
        s.push(format!("{} more", inputs.len() - 4));
    }
    match s.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => "no operands".into(),
    }
}

/// Contiguous (row-major) strides of `shape`, in elements.
pub(crate) fn strides(op: &'static str, shape: &[usize]) -> Result<Vec<usize>> {
    let mut s = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = mul(op, s[i + 1], shape[i + 1])?;
    }
    Ok(s)
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

/// The output shape and layout of `lhs ∘ rhs` under NumPy broadcasting, for `dtype`
/// elements: no wider than the operands' (the arithmetic ops' own type, the comparisons'
/// `u8`), so that equal shapes give the operands' shape unchecked.
pub(crate) fn broadcast(op: &'static str, lhs: &Shape, rhs: &Shape, dtype: DType) -> Result<(Shape, Layout)> {
    if lhs.numel == rhs.numel && **lhs == **rhs {
        // The operands' shape: their buffers hold that many elements at least as wide as
        // `dtype` (the callers' contract), so it needs no check again.
        return Ok((lhs.clone(), Layout::Same));
    }
    let (lhs, rhs): (&[usize], &[usize]) = (lhs, rhs);
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
    let out = Shape::result(op, out, dtype, &[lhs, rhs])?;
    let (nl, nr) = (product(op, &l)?, product(op, &r)?);
    let layout = if nr == 1 && nl == out.numel() {
        Layout::RhsScalar
    } else if nl == 1 && nr == out.numel() {
        Layout::LhsScalar
    } else {
        let bstrides = |s: &[usize]| -> Result<Vec<usize>> {
            Ok(strides(op, s)?.into_iter().zip(s).map(|(st, &d)| if d == 1 { 0 } else { st }).collect())
        };
        Layout::Strided { lhs: bstrides(&l)?, rhs: bstrides(&r)? }
    };
    Ok((out, layout))
}

/// The output shape of an elementwise op of the operands `shapes` under NumPy
/// broadcasting (every shape right-aligned, each dim equal or 1), for `dtype` elements,
/// and each operand's strides over that output shape (0 where it is broadcast).
pub(crate) fn broadcast_all(op: &'static str, shapes: &[&[usize]], dtype: DType) -> Result<(Shape, Vec<Vec<usize>>)> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let padded: Vec<Vec<usize>> = shapes
        .iter()
        .map(|s| {
            let mut v = vec![1; rank - s.len()];
            v.extend_from_slice(s);
            v
        })
        .collect();
    let mut out = vec![1usize; rank];
    for (i, p) in padded.iter().enumerate() {
        for (j, &d) in p.iter().enumerate() {
            if out[j] == 1 {
                out[j] = d;
            } else if d != 1 && d != out[j] {
                // The error names this operand and the first one that set the dim.
                let first = padded.iter().position(|q| q[j] != 1).unwrap_or(0);
                return Err(Error::ShapeMismatch { op, lhs: shapes[first].to_vec(), rhs: shapes[i].to_vec() });
            }
        }
    }
    let out = Shape::result(op, out, dtype, shapes)?;
    let strides = padded
        .iter()
        .map(|p| Ok(strides(op, p)?.into_iter().zip(p).map(|(st, &d)| if d == 1 { 0 } else { st }).collect()))
        .collect::<Result<_>>()?;
    Ok((out, strides))
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
    pub(crate) fn all(n: usize) -> Self {
        Reduction { outer: 1, len: n, inner: 1 }
    }

    /// A reduction over `dim` of `shape`; an error naming `op` if there is no such dim or
    /// the sizes overflow, so that the kernels' `outer * len * inner` and `outer * inner`
    /// cannot.
    pub(crate) fn over(op: &'static str, shape: &[usize], dim: usize) -> Result<Self> {
        let Some(&len) = shape.get(dim) else {
            return Err(Error::InvalidArgument { op, reason: format!("shape {shape:?} has no dim {dim}") });
        };
        let (outer, inner) = (product(op, &shape[..dim])?, product(op, &shape[dim + 1..])?);
        mul(op, outer, inner)?;
        product(op, shape)?;
        Ok(Reduction { outer, len, inner })
    }

    /// The number of outputs.
    pub(crate) fn out_len(&self) -> usize {
        self.outer * self.inner
    }
}

#[cfg(test)]
mod tests {
    /// [`broadcast`] of two shapes given as dims.
    fn bc(op: &'static str, lhs: &[usize], rhs: &[usize], dtype: DType) -> Result<(Shape, Layout)> {
        broadcast(op, &Shape::new(op, lhs, dtype)?, &Shape::new(op, rhs, dtype)?, dtype)
    }

    use super::*;

    #[test]
    fn broadcast_rows_and_columns() {
        let (out, layout) = bc("add", &[2, 3], &[3], DType::F32).unwrap();
        assert_eq!(&*out, &[2, 3]);
        assert_eq!(layout, Layout::Strided { lhs: vec![3, 1], rhs: vec![0, 1] });
        let (out, _) = bc("add", &[2, 1], &[1, 4], DType::F32).unwrap();
        assert_eq!(&*out, &[2, 4]);
        assert_eq!(bc("add", &[4], &[], DType::F32).unwrap().1, Layout::RhsScalar);
        let (out, layout) = bc("add", &[1, 1], &[5], DType::F32).unwrap();
        assert_eq!((&*out, layout), (&[1, 5][..], Layout::LhsScalar));
    }

    #[test]
    fn broadcast_all_lines_up_three_operands() {
        let (out, st) = broadcast_all("where", &[&[2, 1, 3], &[4, 1], &[]], DType::F32).unwrap();
        assert_eq!(&*out, &[2, 4, 3]);
        assert_eq!(st, vec![vec![3, 0, 1], vec![0, 1, 0], vec![0, 0, 0]]);
        let e = broadcast_all("where", &[&[1], &[2, 3], &[4, 1]], DType::U8).unwrap_err();
        assert_eq!(e, Error::ShapeMismatch { op: "where", lhs: vec![2, 3], rhs: vec![4, 1] });
        let (out, st) = broadcast_all("where", &[&[0, 2], &[2]], DType::F32).unwrap();
        assert_eq!((&*out, st), (&[0, 2][..], vec![vec![2, 1], vec![0, 1]]));
    }

    #[test]
    fn broadcast_rejects_incompatible_dims() {
        let e = bc("mul", &[2, 3], &[4], DType::F32).unwrap_err();
        assert_eq!(e, Error::ShapeMismatch { op: "mul", lhs: vec![2, 3], rhs: vec![4] });
    }

    #[test]
    fn broadcast_results_too_large_name_the_op_and_operands() {
        let e = bc("add", &[1 << 40, 1], &[1, 1 << 40], DType::F32).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("add: the result of [1099511627776, 1] and [1, 1099511627776]"), "{msg}");
        assert!(msg.contains("shape [1099511627776, 1099511627776] is too large for f32"), "{msg}");
    }

    #[test]
    fn numel_overflow_is_an_error() {
        assert!(numel("zeros", &[usize::MAX, 2], DType::U8).is_err());
        assert_eq!(numel("zeros", &[], DType::F32).unwrap(), 1);
        assert_eq!(numel("zeros", &[2, 0, 3], DType::F32).unwrap(), 0);
    }

    #[test]
    fn numel_counts_zero_dims_as_one_for_the_span() {
        for shape in [[0, usize::MAX, 2], [usize::MAX, 2, 0]] {
            let e = numel("reshape", &shape, DType::U8).unwrap_err();
            assert_eq!(e, Error::InvalidArgument { op: "reshape", reason: too_large(&shape, DType::U8) });
        }
        let edge = isize::MAX as usize;
        assert_eq!(numel("zeros", &[0, edge], DType::U8).unwrap(), 0);
        assert_eq!(numel("zeros", &[edge], DType::U8).unwrap(), edge);
        assert!(numel("zeros", &[edge + 1], DType::U8).is_err());
        assert!(numel("zeros", &[0, edge / 4 + 1], DType::F32).is_err());
        assert_eq!(numel("zeros", &[edge / 4], DType::F32).unwrap(), edge / 4);
    }

    #[test]
    fn strides_and_reductions_check_their_products() {
        assert_eq!(strides("add", &[2, 3, 4]).unwrap(), vec![12, 4, 1]);
        assert!(strides("add", &[0, usize::MAX, 2]).is_err());
        let r = Reduction::over("sum_dim", &[2, 3, 4], 1).unwrap();
        assert_eq!((r.outer, r.len, r.inner, r.out_len()), (2, 3, 4, 8));
        assert!(Reduction::over("sum_dim", &[0, usize::MAX, 2], 0).is_err());
        assert!(Reduction::over("sum_dim", &[1 << 40, 0, 1 << 40], 1).is_err());
        assert!(Reduction::over("sum_dim", &[2, 3], 2).is_err());
    }

    #[test]
    fn result_errors_list_the_operands() {
        let e = Shape::result("matmul", vec![1 << 33, 1 << 33], DType::F32, &[&[1 << 33, 0], &[0, 1 << 33]]);
        let msg = e.unwrap_err().to_string();
        assert!(msg.starts_with("matmul: the result of [8589934592, 0] and [0, 8589934592] would have shape"), "{msg}");
        assert_eq!(operands(&[&[1], &[2], &[3]]), "[1], [2] and [3]");
        assert_eq!(operands(&[&[1usize][..]; 6]), "[1], [1], [1], [1] and 2 more");
    }

    #[test]
    fn dims_in_place_and_on_the_heap_read_back_whole() {
        for rank in [0, 1, INLINE - 1, INLINE, INLINE + 1, 9] {
            let dims: Vec<usize> = (1..=rank).collect();
            let shape = Shape::new("test", &dims, DType::F32).unwrap();
            assert_eq!(&*shape, &dims[..], "rank {rank}");
            assert_eq!(shape.numel(), dims.iter().product::<usize>());
            assert!(matches!(shape.dims, Dims::Inline { .. }) == (rank <= INLINE), "rank {rank}");
            let copy = shape.clone();
            assert_eq!(copy, shape);
            assert_ne!(Shape::new("test", [rank + 1], DType::F32).unwrap(), shape);
            assert_eq!(format!("{:?}", shape.dims), format!("{dims:?}"));
        }
        assert_eq!(&*Shape::scalar(), &[] as &[usize]);
    }
}
