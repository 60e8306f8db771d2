//! The host backend's compute loops, generic over the element type.
//!
//! The loops walk the operands' dims, and an empty tensor's dims may still be huge
//! (`[1 << 40, 0]`): a kernel with an empty result returns before walking any.

use super::{rand_bits, BinaryOp, Blocks, ReduceOp, UnaryOp};
use crate::element::{Element, Float};
use crate::error::{Error, Result};
use crate::shape::{Layout, Reduction};

pub(super) fn arange<T: Element>(out: &mut [T], start: f64, step: f64) {
    for (i, o) in out.iter_mut().enumerate() {
        *o = T::from_f64(start + i as f64 * step);
    }
}

pub(super) fn rand<T: Float>(out: &mut [T], seed: u64) {
    for (i, o) in out.iter_mut().enumerate() {
        *o = T::from_bits_uniform(rand_bits(seed, i as u64));
    }
}

pub(super) fn unary<T: Element>(op: UnaryOp, x: &[T], out: &mut [T]) {
    let f: fn(T) -> T = match op {
        UnaryOp::Neg => T::neg,
        // NaN stays NaN, as in torch.relu.
        UnaryOp::Relu => |v| if v < T::ZERO { T::ZERO } else { v },
        // Wrapping for integers: i32::MIN stays i32::MIN, as in torch.abs.
        UnaryOp::Abs => |v| if v < T::ZERO { v.neg() } else { v },
        UnaryOp::Square => |v| v.mul(v),
        // Float types take `unary_float`, and `float_only` refuses these ops for integers
        // before any launch; through f64 all the same, so that every op has a kernel.
        UnaryOp::Exp => |v| T::from_f64(v.to_f64().exp()),
        UnaryOp::Sqrt => |v| T::from_f64(v.to_f64().sqrt()),
    };
    for (o, &v) in out.iter_mut().zip(x) {
        *o = f(v);
    }
}

pub(super) fn unary_float<T: Float>(op: UnaryOp, x: &[T], out: &mut [T]) {
    match op {
        UnaryOp::Exp => out.iter_mut().zip(x).for_each(|(o, &v)| *o = v.exp()),
        UnaryOp::Sqrt => out.iter_mut().zip(x).for_each(|(o, &v)| *o = v.sqrt()),
        // Through f64 (exact both ways) so that -0.0 becomes 0.0.
        UnaryOp::Abs => out.iter_mut().zip(x).for_each(|(o, &v)| *o = T::from_f64(v.to_f64().abs())),
        UnaryOp::Neg | UnaryOp::Relu | UnaryOp::Square => unary(op, x, out),
    }
}

/// `x` limited to `[lo, hi]`; NaN stays NaN (both comparisons are false), as in torch.clamp.
pub(super) fn clamp<T: Element>(x: &[T], lo: T, hi: T, out: &mut [T]) {
    for (o, &v) in out.iter_mut().zip(x) {
        *o = if v < lo {
            lo
        } else if v > hi {
            hi
        } else {
            v
        };
    }
}

/// `x^e`, computed in f64 and rounded: the reference the GPU's `powf`/`pow` are checked against.
pub(super) fn pow<T: Float>(x: &[T], e: T, out: &mut [T]) {
    let e = e.to_f64();
    for (o, &v) in out.iter_mut().zip(x) {
        *o = T::from_f64(v.to_f64().powf(e));
    }
}

fn apply<T: Element>(op: BinaryOp, a: T, b: T) -> Option<T> {
    Some(match op {
        BinaryOp::Add => a.add(b),
        BinaryOp::Sub => a.sub(b),
        BinaryOp::Mul => a.mul(b),
        BinaryOp::Div => return a.div(b),
    })
}

pub(super) fn binary<T: Element>(
    op: BinaryOp,
    l: &[T],
    r: &[T],
    out: &mut [T],
    out_shape: &[usize],
    layout: &Layout,
) -> Result<()> {
    let mut ok = true;
    let mut put = |o: &mut T, a: T, b: T| match apply(op, a, b) {
        Some(v) => *o = v,
        None => ok = false,
    };
    match layout {
        Layout::Same => out.iter_mut().zip(l.iter().zip(r)).for_each(|(o, (&a, &b))| put(o, a, b)),
        Layout::RhsScalar => out.iter_mut().zip(l).for_each(|(o, &a)| put(o, a, r[0])),
        Layout::LhsScalar => out.iter_mut().zip(r).for_each(|(o, &b)| put(o, l[0], b)),
        Layout::Strided { lhs, rhs } => {
            // An odometer over the output index, moving both operand offsets with it.
            let rank = out_shape.len();
            let mut idx = vec![0usize; rank];
            let (mut li, mut ri) = (0usize, 0usize);
            for o in out.iter_mut() {
                put(o, l[li], r[ri]);
                for d in (0..rank).rev() {
                    idx[d] += 1;
                    li += lhs[d];
                    ri += rhs[d];
                    if idx[d] < out_shape[d] {
                        break;
                    }
                    li -= lhs[d] * idx[d];
                    ri -= rhs[d] * idx[d];
                    idx[d] = 0;
                }
            }
        }
    }
    if ok {
        Ok(())
    } else {
        Err(Error::InvalidArgument { op: "div", reason: "integer division by zero".into() })
    }
}

pub(super) fn reduce<T: Element>(op: ReduceOp, x: &[T], out: &mut [T], r: Reduction) {
    if out.is_empty() {
        return;
    }
    for o in 0..r.outer {
        for i in 0..r.inner {
            let at = |j: usize| x[(o * r.len + j) * r.inner + i];
            out[o * r.inner + i] = match op {
                ReduceOp::Max => (1..r.len).fold(at(0), |m, j| m.max_of(at(j))),
                ReduceOp::Sum | ReduceOp::Mean if T::DTYPE.is_float() => {
                    // Accumulate in f64: the host is the reference the GPU is checked against.
                    let s: f64 = (0..r.len).map(|j| at(j).to_f64()).sum();
                    T::from_f64(if op == ReduceOp::Mean { s / r.len as f64 } else { s })
                }
                ReduceOp::Sum | ReduceOp::Mean => (0..r.len).fold(T::ZERO, |s, j| s.add(at(j))),
            };
        }
    }
}

pub(super) fn matmul<T: Element>(a: &[T], b: &[T], out: &mut [T], m: usize, k: usize, n: usize) {
    if out.is_empty() {
        return;
    }
    out.fill(T::ZERO);
    for i in 0..m {
        let row = &mut out[i * n..(i + 1) * n];
        for p in 0..k {
            let av = a[i * k + p];
            for (o, &bv) in row.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                *o = o.add(av.mul(bv));
            }
        }
    }
}

pub(super) fn transpose<T: Element>(x: &[T], out: &mut [T], rows: usize, cols: usize) {
    if out.is_empty() {
        return;
    }
    for i in 0..rows {
        for j in 0..cols {
            out[j * rows + i] = x[i * cols + j];
        }
    }
}

/// The numbers of one [`Blocks`] copy, without its source buffer.
#[derive(Clone, Copy, Debug)]
pub(super) struct Geometry {
    src_offset: usize,
    src_stride: usize,
    dst_offset: usize,
    dst_stride: usize,
    count: usize,
    block: usize,
}

impl Geometry {
    pub(super) fn of<B>(b: &Blocks<'_, B>) -> Geometry {
        let Blocks { src_offset, src_stride, dst_offset, dst_stride, count, block, .. } = *b;
        Geometry { src_offset, src_stride, dst_offset, dst_stride, count, block }
    }
}

/// Copies the blocks of `b` (elements of `size` bytes) from `src` into `dst`.
pub(super) fn copy_blocks(dst: &mut [u8], src: &[u8], size: usize, b: &Geometry) {
    let width = b.block * size;
    for i in 0..b.count {
        let s = (b.src_offset + i * b.src_stride) * size;
        let d = (b.dst_offset + i * b.dst_stride) * size;
        dst[d..d + width].copy_from_slice(&src[s..s + width]);
    }
}
