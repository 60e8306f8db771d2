//! Elementwise loops (elementwise.cu): unary ops, casts, clamp, pow, and binary ops under
//! broadcasting, with a streamed AVX path for large same-shape f32 operands.

use crate::backend::host::kernels::math;
use crate::backend::host::kernels::{map, GRAIN};
use crate::backend::workers::split_mut;
use crate::backend::{BinaryOp, UnaryOp};
use crate::element::{Element, Float};
use crate::error::{Error, Result};
use crate::shape::Layout;

pub(in crate::backend) fn unary<T: Element>(op: UnaryOp, x: &[T], out: &mut [T]) -> Result<()> {
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
        // Every float type computes these in f64 and rounds once (see `host_math`).
        UnaryOp::Log => |v| T::from_f64(v.to_f64().ln()),
        UnaryOp::Tanh => |v| T::from_f64(v.to_f64().tanh()),
        UnaryOp::Sigmoid => |v| T::from_f64(math::sigmoid(v.to_f64())),
        UnaryOp::Gelu => |v| T::from_f64(math::gelu(v.to_f64())),
        UnaryOp::GeluTanh => |v| T::from_f64(math::gelu_tanh(v.to_f64())),
        UnaryOp::Sin => |v| T::from_f64(v.to_f64().sin()),
        UnaryOp::Cos => |v| T::from_f64(v.to_f64().cos()),
    };
    map(x, out, |x, out| out.iter_mut().zip(x).for_each(|(o, &v)| *o = f(v)))
}

/// `g · op'(x)` for each element (elementwise.cu's `{gelu,gelu_tanh}_grad`), through f64
/// and rounded once.
pub(in crate::backend) fn activation_grad<T: Float>(op: UnaryOp, x: &[T], g: &[T], out: &mut [T]) -> Result<()> {
    let d: fn(f64) -> f64 = match op {
        UnaryOp::Gelu => math::gelu_grad,
        UnaryOp::GeluTanh => math::gelu_tanh_grad,
        _ => return op.grad_name().map(drop),
    };
    split_mut(out, 1, GRAIN, &|start, o| {
        let end = (start + o.len()).min(x.len()).min(g.len());
        let (x, g) = (&x[start.min(end)..end], &g[start.min(end)..end]);
        for ((o, x), g) in o.iter_mut().zip(x).zip(g) {
            *o = T::from_f64(g.to_f64() * d(x.to_f64()));
        }
        Ok(())
    })
}

pub(in crate::backend) fn unary_float<T: Float>(op: UnaryOp, x: &[T], out: &mut [T]) -> Result<()> {
    let f: fn(T) -> T = match op {
        UnaryOp::Exp => T::exp,
        UnaryOp::Sqrt => T::sqrt,
        // Through f64 (exact both ways) so that -0.0 becomes 0.0.
        UnaryOp::Abs => |v| T::from_f64(v.to_f64().abs()),
        UnaryOp::Neg | UnaryOp::Relu | UnaryOp::Square => return unary(op, x, out),
        UnaryOp::Log
        | UnaryOp::Tanh
        | UnaryOp::Sigmoid
        | UnaryOp::Gelu
        | UnaryOp::GeluTanh
        | UnaryOp::Sin
        | UnaryOp::Cos => return unary(op, x, out),
    };
    map(x, out, |x, out| out.iter_mut().zip(x).for_each(|(o, &v)| *o = f(v)))
}

/// Each element of `x` as a `U`, as [`Element::from_scalar`] converts (Rust's `as`; the
/// 16-bit float types rounded once).
pub(in crate::backend) fn cast<F: Element, U: Element>(x: &[F], out: &mut [U]) -> Result<()> {
    map(x, out, |x, out| out.iter_mut().zip(x).for_each(|(o, &v)| *o = U::from_scalar(v.to_scalar())))
}

/// `x` limited to `[lo, hi]`; NaN stays NaN (both comparisons are false), as in torch.clamp.
pub(in crate::backend) fn clamp<T: Element>(x: &[T], lo: T, hi: T, out: &mut [T]) -> Result<()> {
    map(x, out, |x, out| {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = if v < lo {
                lo
            } else if v > hi {
                hi
            } else {
                v
            };
        }
    })
}

/// `x^e`, computed in f64 and rounded: the reference the GPU's `powf`/`pow` are checked against.
pub(in crate::backend) fn pow<T: Float>(x: &[T], e: T, out: &mut [T]) -> Result<()> {
    let e = e.to_f64();
    map(x, out, |x, out| out.iter_mut().zip(x).for_each(|(o, &v)| *o = T::from_f64(v.to_f64().powf(e))))
}

fn apply<T: Element>(op: BinaryOp, a: T, b: T) -> Option<T> {
    Some(match op {
        BinaryOp::Add => a.add(b),
        BinaryOp::Sub => a.sub(b),
        BinaryOp::Mul => a.mul(b),
        BinaryOp::Div => return a.div(b),
    })
}

pub(in crate::backend) fn binary<T: Element>(
    op: BinaryOp,
    l: &[T],
    r: &[T],
    out: &mut [T],
    out_shape: &[usize],
    layout: &Layout,
) -> Result<()> {
    split_mut(out, 1, GRAIN, &|start, out| binary_part(op, l, r, out, start, out_shape, layout))
}

/// Elements `start..start + out.len()` of a binary op.
fn binary_part<T: Element>(
    op: BinaryOp,
    l: &[T],
    r: &[T],
    out: &mut [T],
    start: usize,
    out_shape: &[usize],
    layout: &Layout,
) -> Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    let mut ok = true;
    let mut put = |o: &mut T, a: T, b: T| match apply(op, a, b) {
        Some(v) => *o = v,
        None => ok = false,
    };
    fn from<T>(x: &[T], start: usize) -> &[T] {
        x.get(start..).unwrap_or(&[])
    }
    match layout {
        Layout::Same if same_f32_streamed(op, from(l, start), from(r, start), out) => {}
        Layout::Same => {
            out.iter_mut().zip(from(l, start).iter().zip(from(r, start))).for_each(|(o, (&a, &b))| put(o, a, b))
        }
        Layout::RhsScalar => out.iter_mut().zip(from(l, start)).for_each(|(o, &a)| put(o, a, r[0])),
        Layout::LhsScalar => out.iter_mut().zip(from(r, start)).for_each(|(o, &b)| put(o, l[0], b)),
        Layout::Strided { lhs, rhs } => {
            // An odometer over the output index, moving both operand offsets with it,
            // started at `start` (every dim is non-zero: the output is not empty).
            let rank = out_shape.len();
            let mut idx = vec![0usize; rank];
            let (mut li, mut ri, mut rest) = (0usize, 0usize, start);
            for d in (0..rank).rev() {
                idx[d] = rest % out_shape[d];
                rest /= out_shape[d];
                li += idx[d] * lhs[d];
                ri += idx[d] * rhs[d];
            }
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

/// Parts of a same-shape f32 op at least this long store past the cache.
const STREAM_MIN: usize = 1 << 18;

/// `out[i] = l[i] op r[i]` for a long part of an f32 op on x86-64 with AVX, eight at a
/// time, stored with non-temporal writes: the output is not read into the cache first,
/// which saves a third of the memory traffic, as a large memcpy does. The same IEEE
/// operations as the scalar loop, operands in the same order, so the same bits (NaN
/// payloads included). `false` when the path does not apply and nothing was written.
fn same_f32_streamed<T: Element>(op: BinaryOp, l: &[T], r: &[T], out: &mut [T]) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        let n = out.len();
        if T::DTYPE != crate::element::DType::F32
            || n < STREAM_MIN
            || l.len() < n
            || r.len() < n
            || !std::arch::is_x86_feature_detected!("avx")
        {
            return false;
        }
        let (l, r): (&[f32], &[f32]) = (bytemuck::cast_slice(&l[..n]), bytemuck::cast_slice(&r[..n]));
        // SAFETY: the processor has AVX (checked above) and the three slices hold `n`
        // elements each.
        unsafe { same_f32_avx(op, l, r, bytemuck::cast_slice_mut(out)) };
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (op, l, r, out);
        false
    }
}

/// [`same_f32_streamed`]'s loop.
///
/// # Safety
/// The processor has AVX; `l`, `r` and `out` have the same length.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
unsafe fn same_f32_avx(op: BinaryOp, l: &[f32], r: &[f32], out: &mut [f32]) {
    use std::arch::x86_64::{_mm256_add_ps, _mm256_div_ps, _mm256_loadu_ps, _mm256_mul_ps, _mm256_stream_ps};
    use std::arch::x86_64::{_mm256_sub_ps, _mm_sfence};
    let n = out.len();
    let one = |a: f32, b: f32| match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
    };
    // Plain stores up to a 32-byte aligned output, which the streaming store needs.
    let head = out.as_ptr().align_offset(32).min(n);
    for i in 0..head {
        out[i] = one(l[i], r[i]);
    }
    let body = head + (n - head) / 8 * 8;
    macro_rules! stream {
        ($f:ident) => {{
            let mut i = head;
            while i < body {
                // SAFETY: `i + 8 <= body <= n`, so eight f32 of each slice from `i`; the
                // output address is 32-byte aligned (`head` made it so, and `i - head` is
                // a multiple of 8 elements).
                unsafe {
                    let v = $f(_mm256_loadu_ps(l.as_ptr().add(i)), _mm256_loadu_ps(r.as_ptr().add(i)));
                    _mm256_stream_ps(out.as_mut_ptr().add(i), v);
                }
                i += 8;
            }
        }};
    }
    match op {
        BinaryOp::Add => stream!(_mm256_add_ps),
        BinaryOp::Sub => stream!(_mm256_sub_ps),
        BinaryOp::Mul => stream!(_mm256_mul_ps),
        BinaryOp::Div => stream!(_mm256_div_ps),
    }
    for i in body..n {
        out[i] = one(l[i], r[i]);
    }
    // The streamed stores are weakly ordered: make them visible before this part is
    // reported done.
    _mm_sfence();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The streamed f32 loop gives the scalar loop's bits for every op, NaN, infinities,
    /// -0.0 and subnormals included, at an unaligned output and an odd length.
    #[test]
    fn streamed_f32_ops_equal_the_scalar_loop_bit_for_bit() {
        let n = STREAM_MIN + 13;
        let special = [f32::NAN, -f32::NAN, f32::INFINITY, -0.0, f32::MIN_POSITIVE / 8.0, 0.0];
        let val = |i: usize, k: usize| match (i * 7 + k) % 41 {
            j if j < special.len() => special[j],
            j => (j as f32 - 20.0) * 0.37 + i as f32 * 1e-3,
        };
        let l: Vec<f32> = (0..n).map(|i| val(i, 0)).collect();
        let r: Vec<f32> = (0..n).map(|i| val(i, 5)).collect();
        for op in [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div] {
            let mut buf = vec![0.0f32; n + 1];
            let out = &mut buf[1..];
            let streamed = same_f32_streamed(op, &l, &r, out);
            if cfg!(target_arch = "x86_64") && std::arch::is_x86_feature_detected!("avx") {
                assert!(streamed, "the streamed path applies to {n} f32");
            }
            if !streamed {
                continue;
            }
            for i in 0..n {
                let want = apply(op, l[i], r[i]).unwrap();
                assert_eq!(out[i].to_bits(), want.to_bits(), "{op:?} at {i}: {} {} ", l[i], r[i]);
            }
        }
        // Too short, or not f32: not taken, nothing written.
        let mut small = vec![7.0f32; 8];
        assert!(!same_f32_streamed(BinaryOp::Add, &l[..8], &r[..8], &mut small));
        assert_eq!(small, vec![7.0; 8]);
        let mut ints = vec![0i32; n];
        assert!(!same_f32_streamed(BinaryOp::Add, &vec![1i32; n], &vec![2i32; n], &mut ints));
    }
}
