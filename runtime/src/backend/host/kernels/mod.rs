//! The host backend's compute loops, generic over the element type.
//!
//! Above [`GRAIN`] elements of work a kernel splits its output into contiguous chunks over
//! the process's worker pool (`workers::split_mut`, `LOCUS_HOST_THREADS`); on a
//! simulated device that happens inside the stream's job, so the stream's order is kept
//! and only the job itself runs wider. Each output element is computed as on one thread:
//! elementwise ops, copies, transposes, `max` and integer sums are bit-identical whatever
//! the split. Float `sum` and `mean` accumulate in f64, in sixteen lanes per row and one
//! partial sum per thread, added in a fixed order: the f64 result is within
//! `n · 2⁻⁵³ · Σ|x|` of the exact sum, as any summation order is, so an f32 result is the
//! sequential one or one ulp from it. Reductions over a dim other than the last keep the
//! sequential order per output (bit-identical). f32 and f64 matmul go to
//! `matrixmultiply` (its own threads); integer matmul is a loop split by rows.
//!
//! The loops walk the operands' dims, and an empty tensor's dims may still be huge
//! (`[1 << 40, 0]`): a kernel with an empty result returns before walking any.

pub(in crate::backend) mod gemm;
pub(in crate::backend) mod math;
pub(in crate::backend) mod permute;
pub(in crate::backend) mod select;
pub(in crate::backend) mod softmax;

use crate::backend::workers::split_mut;
use crate::backend::{rand_bits, BinaryOp, Blocks, ReduceOp, UnaryOp};
use crate::element::{Element, Float};
use crate::error::{Error, Result};
use crate::shape::{Layout, Reduction};

/// Elements of work (or bytes, for copies: [`COPY_GRAIN`]) below which a kernel runs on
/// one thread: waking a pool thread costs more than it saves on less.
pub(in crate::backend) const GRAIN: usize = 1 << 15;

/// Bytes below which a copy runs on one thread.
pub(in crate::backend) const COPY_GRAIN: usize = 1 << 18;

/// `f(x_part, out_part)` over matching parts of `x` and `out`, split over the pool.
fn map<T: Element, U: Element>(x: &[T], out: &mut [U], f: impl Fn(&[T], &mut [U]) + Sync) -> Result<()> {
    split_mut(out, 1, GRAIN, &|start, o| {
        let end = (start + o.len()).min(x.len());
        f(&x[start.min(end)..end], o);
        Ok(())
    })
}

/// Every element of `out` set to `value`.
pub(in crate::backend) fn fill<T: Element>(out: &mut [T], value: T) -> Result<()> {
    split_mut(out, 1, GRAIN, &|_, o| {
        o.fill(value);
        Ok(())
    })
}

pub(in crate::backend) fn arange<T: Element>(out: &mut [T], start: f64, step: f64) -> Result<()> {
    split_mut(out, 1, GRAIN, &|at, o| {
        for (i, o) in o.iter_mut().enumerate() {
            *o = T::from_f64(start + (at + i) as f64 * step);
        }
        Ok(())
    })
}

pub(in crate::backend) fn rand<T: Float>(out: &mut [T], seed: u64) -> Result<()> {
    split_mut(out, 1, GRAIN, &|at, o| {
        for (i, o) in o.iter_mut().enumerate() {
            *o = T::from_bits_uniform(rand_bits(seed, (at + i) as u64));
        }
        Ok(())
    })
}

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
    };
    map(x, out, |x, out| out.iter_mut().zip(x).for_each(|(o, &v)| *o = f(v)))
}

pub(in crate::backend) fn unary_float<T: Float>(op: UnaryOp, x: &[T], out: &mut [T]) -> Result<()> {
    let f: fn(T) -> T = match op {
        UnaryOp::Exp => T::exp,
        UnaryOp::Sqrt => T::sqrt,
        // Through f64 (exact both ways) so that -0.0 becomes 0.0.
        UnaryOp::Abs => |v| T::from_f64(v.to_f64().abs()),
        UnaryOp::Neg | UnaryOp::Relu | UnaryOp::Square => return unary(op, x, out),
        UnaryOp::Log | UnaryOp::Tanh | UnaryOp::Sigmoid | UnaryOp::Gelu | UnaryOp::GeluTanh => {
            return unary(op, x, out)
        }
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

/// The f64 sum of `x` in sixteen lanes, added pairwise; with AVX2 where the processor
/// has it (the same additions in the same order, so the same result, four at a time).
fn sum_f64<T: Element>(x: &[T]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the processor has AVX2, checked on the line above.
        return unsafe { sum_f64_avx2(x) };
    }
    sum_lanes(x)
}

/// [`sum_lanes`] compiled for AVX2.
///
/// # Safety
/// The processor must have AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum_f64_avx2<T: Element>(x: &[T]) -> f64 {
    sum_lanes(x)
}

/// Sixteen independent f64 sums (which the compiler vectorizes), then added pairwise.
/// Lanes start at -0.0, the neutral element, as `Iterator::sum` of f64 does.
#[inline(always)]
fn sum_lanes<T: Element>(x: &[T]) -> f64 {
    let mut lanes = [-0.0f64; 16];
    let mut runs = x.chunks_exact(16);
    for run in &mut runs {
        for (s, v) in lanes.iter_mut().zip(run) {
            *s += v.to_f64();
        }
    }
    for (s, v) in lanes.iter_mut().zip(runs.remainder()) {
        *s += v.to_f64();
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
fn reduce_row<T: Element>(op: ReduceOp, x: &[T]) -> Acc<T> {
    match op {
        ReduceOp::Max => Acc::Elem(x[1..].iter().fold(x[0], |m, &v| m.max_of(v))),
        _ if T::DTYPE.is_float() => Acc::Float(sum_f64(x)),
        _ => Acc::Elem(x.iter().fold(T::ZERO, |s, &v| s.add(v))),
    }
}

/// Two partial results of `op`, the earlier one first.
fn combine<T: Element>(op: ReduceOp, a: Acc<T>, b: Acc<T>) -> Acc<T> {
    match (a, b) {
        (Acc::Float(a), Acc::Float(b)) => Acc::Float(a + b),
        (Acc::Elem(a), Acc::Elem(b)) if op == ReduceOp::Max => Acc::Elem(a.max_of(b)),
        (Acc::Elem(a), Acc::Elem(b)) => Acc::Elem(a.add(b)),
        (a, _) => a, // one op gives one kind of partial
    }
}

fn finish<T: Element>(op: ReduceOp, a: Acc<T>, len: usize) -> T {
    match a {
        Acc::Float(s) => T::from_f64(if op == ReduceOp::Mean { s / len as f64 } else { s }),
        Acc::Elem(v) => v,
    }
}

pub(in crate::backend) fn reduce<T: Element>(op: ReduceOp, x: &[T], out: &mut [T], r: Reduction) -> Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    if r.len == 0 {
        // A sum of nothing is the neutral element (-0.0 for floats, as `Iterator::sum`
        // gives; a mean of nothing is then NaN); the tensor layer refuses `max`.
        return match op {
            ReduceOp::Max => Err(Error::InvalidArgument { op: "max", reason: "a reduction over nothing".into() }),
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
fn reduce_strided<T: Element>(op: ReduceOp, x: &[T], out: &mut [T], start: usize, r: Reduction) -> Result<()> {
    let mut done = 0;
    while done < out.len() {
        let (o, i0) = ((start + done) / r.inner, (start + done) % r.inner);
        let n = (r.inner - i0).min(out.len() - done);
        let run = |j: usize| &x[(o * r.len + j) * r.inner + i0..][..n];
        let dst = &mut out[done..done + n];
        if op != ReduceOp::Max && T::DTYPE.is_float() {
            let mut acc = vec![-0.0f64; n];
            for j in 0..r.len {
                acc.iter_mut().zip(run(j)).for_each(|(s, v)| *s += v.to_f64());
            }
            dst.iter_mut().zip(acc).for_each(|(d, s)| *d = finish(op, Acc::Float(s), r.len));
        } else {
            // Max starts from the first element, an integer sum from zero, as a fold does.
            let first = if op == ReduceOp::Max {
                dst.copy_from_slice(run(0));
                1
            } else {
                dst.fill(T::ZERO);
                0
            };
            for j in first..r.len {
                for (d, &v) in dst.iter_mut().zip(run(j)) {
                    *d = if op == ReduceOp::Max { d.max_of(v) } else { d.add(v) };
                }
            }
        }
        done += n;
    }
    Ok(())
}

/// The sizes of a matmul, checked against its operands.
fn gemm_sizes<T>(a: &[T], b: &[T], out: &[T], m: usize, k: usize, n: usize) -> Result<()> {
    let fits = |x: &[T], r: usize, c: usize| r.checked_mul(c).is_some_and(|len| x.len() >= len);
    if fits(a, m, k) && fits(b, k, n) && m.checked_mul(n) == Some(out.len()) {
        return Ok(());
    }
    Err(Error::InvalidArgument {
        op: "matmul",
        reason: format!("operands of {} and {} elements for [{m}, {k}] x [{k}, {n}]", a.len(), b.len()),
    })
}

/// `out = a · b` for row-major `[m, k]` and `[k, n]` f32 matrices, by `matrixmultiply`.
pub(in crate::backend) fn matmul_f32(
    a: &[f32],
    b: &[f32],
    out: &mut [f32],
    m: usize,
    k: usize,
    n: usize,
) -> Result<()> {
    gemm_sizes(a, b, out, m, k, n)?;
    if out.is_empty() || k == 0 {
        return fill(out, 0.0);
    }
    // Every size fits `isize`: each is at most the length of a slice of them.
    let (rsa, rsb) = (k as isize, n as isize);
    // SAFETY: `a` holds `m * k`, `b` `k * n` and `out` `m * n` elements (checked above),
    // at the row-major strides given; `out` is not read (beta is 0) and is not aliased.
    unsafe {
        matrixmultiply::sgemm(m, k, n, 1.0, a.as_ptr(), rsa, 1, b.as_ptr(), rsb, 1, 0.0, out.as_mut_ptr(), rsb, 1)
    };
    Ok(())
}

/// `out = a · b` for row-major `[m, k]` and `[k, n]` f64 matrices, by `matrixmultiply`.
pub(in crate::backend) fn matmul_f64(
    a: &[f64],
    b: &[f64],
    out: &mut [f64],
    m: usize,
    k: usize,
    n: usize,
) -> Result<()> {
    gemm_sizes(a, b, out, m, k, n)?;
    if out.is_empty() || k == 0 {
        return fill(out, 0.0);
    }
    let (rsa, rsb) = (k as isize, n as isize);
    // SAFETY: as in `matmul_f32`.
    unsafe {
        matrixmultiply::dgemm(m, k, n, 1.0, a.as_ptr(), rsa, 1, b.as_ptr(), rsb, 1, 0.0, out.as_mut_ptr(), rsb, 1)
    };
    Ok(())
}

/// `out = a · b` as a loop (integer types), rows split over the pool.
pub(in crate::backend) fn matmul<T: Element>(
    a: &[T],
    b: &[T],
    out: &mut [T],
    m: usize,
    k: usize,
    n: usize,
) -> Result<()> {
    gemm_sizes(a, b, out, m, k, n)?;
    if out.is_empty() {
        return Ok(());
    }
    let rows_per_part = (GRAIN / k.saturating_mul(n).max(1)).max(1);
    split_mut(out, n, rows_per_part, &|start, out| {
        out.fill(T::ZERO);
        for (r, row) in out.chunks_mut(n).enumerate() {
            let i = start / n + r;
            for p in 0..k {
                let av = a[i * k + p];
                for (o, &bv) in row.iter_mut().zip(&b[p * n..(p + 1) * n]) {
                    *o = o.add(av.mul(bv));
                }
            }
        }
        Ok(())
    })
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

/// `dst` made a copy of `src` (the same length), split over the pool when large.
pub(in crate::backend) fn copy(dst: &mut [u8], src: &[u8]) -> Result<()> {
    if dst.len() != src.len() {
        return Err(Error::InvalidArgument { op: "copy", reason: format!("{} bytes into {}", src.len(), dst.len()) });
    }
    split_mut(dst, 1, COPY_GRAIN, &|start, d| {
        d.copy_from_slice(&src[start..start + d.len()]);
        Ok(())
    })
}

/// The numbers of one [`Blocks`] copy, without its source buffer.
#[derive(Clone, Copy, Debug)]
pub(in crate::backend) struct Geometry {
    src_offset: usize,
    src_stride: usize,
    dst_offset: usize,
    dst_stride: usize,
    count: usize,
    block: usize,
}

impl Geometry {
    pub(in crate::backend) fn of<B>(b: &Blocks<'_, B>) -> Geometry {
        let Blocks { src_offset, src_stride, dst_offset, dst_stride, count, block, .. } = *b;
        Geometry { src_offset, src_stride, dst_offset, dst_stride, count, block }
    }
}

/// Copies the blocks of `b` (elements of `size` bytes) from `src` into `dst`; blocks
/// that lie end to end in `dst` are split over the pool when large.
pub(in crate::backend) fn copy_blocks(dst: &mut [u8], src: &[u8], size: usize, b: &Geometry) -> Result<()> {
    let width = b.block * size;
    if b.count == 0 || width == 0 {
        return Ok(());
    }
    let src_at = |i: usize| (b.src_offset + i * b.src_stride) * size;
    if b.dst_stride == b.block {
        let d0 = b.dst_offset * size;
        let run = &mut dst[d0..d0 + b.count * width];
        return split_mut(run, width, (COPY_GRAIN / width).max(1), &|start, d| {
            for (i, w) in d.chunks_mut(width).enumerate() {
                let s = src_at(start / width + i);
                w.copy_from_slice(&src[s..s + width]);
            }
            Ok(())
        });
    }
    for i in 0..b.count {
        let (s, d) = (src_at(i), (b.dst_offset + i * b.dst_stride) * size);
        dst[d..d + width].copy_from_slice(&src[s..s + width]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::backend::host::kernels::*;

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
