//! The cuda side of the small ops: a scalar on the left of `-` and `/`, unary ops with
//! scalar parameters (`pow`, `clamp`), and strided block copies (narrow, select, cat and
//! stack along any dim). Kept apart from mod.rs, which holds the older ops.

use std::ffi::c_void;

use locus_kernels::Source;

use super::{cuda, CudaBackend, UNROLL};
use crate::backend::{Backend, BinaryOp, Blocks, Buffer, ParamOp};
use crate::device::DeviceId;
use crate::element::{DType, Scalar};
use crate::error::{Error, Result};

/// The grid work of a vectorised elementwise kernel over `n` elements of `dtype`.
fn vector_work(n: u64, dtype: DType) -> u64 {
    n.div_ceil(16 / dtype.size() as u64).div_ceil(UNROLL)
}

pub(super) fn scalar_binary(
    b: &CudaBackend,
    device: DeviceId,
    op: BinaryOp,
    dtype: DType,
    lhs: Scalar,
    rhs: &Buffer,
    len: usize,
) -> Result<Buffer> {
    if matches!(op, BinaryOp::Add | BinaryOp::Mul) {
        // These commute (IEEE and wrapping integer arithmetic alike).
        return b.binary_scalar(device, op, dtype, rhs, len, lhs);
    }
    let (dev, s, out) = b.alloc(device, dtype, len, &[rhs])?;
    if len == 0 {
        return b.done(out);
    }
    let check = op == BinaryOp::Div && !dtype.is_float();
    let f = dev.kernel(Source::Elementwise, op.name(), "rscalar", dtype)?;
    let (a, o, n) = (cuda(rhs)?.ptr(), out.ptr(), len as u64);
    let grid = dev.grid_full(vector_work(n, dtype), 256);
    b.with_div_check(&s, check, |err| {
        // `{op}_rscalar_{dtype}(const T* a, T s, T* out, u64 n, int* err)`: `rhs` and `out` hold `n` = `len` elements
        // of `dtype`, ready and kept alive on `s` (see `CudaBackend::alloc`);
        // SAFETY: `v` has `dtype`'s Rust type (the tensor layer passes `T::to_scalar` with `T::DTYPE`); `err` is
        // `with_div_check`'s 4-byte flag for integer division, else 0, which the kernel touches only for an integer
        // zero divisor.
        with_scalar!(lhs, v => unsafe { dev.launch(f, (grid, 1, 1), (256, 1, 1), s.raw.0, &mut args![a, v, o, n, err]) })
    })?;
    b.done(out)
}

pub(super) fn unary_param(
    b: &CudaBackend,
    device: DeviceId,
    op: ParamOp,
    dtype: DType,
    x: &Buffer,
    len: usize,
) -> Result<Buffer> {
    let mismatch = |op| Error::InvalidArgument { op, reason: format!("parameters of another type than {dtype}") };
    let (xp, n) = (cuda(x)?.ptr(), len as u64);
    let work = (Source::Elementwise, "", vector_work(n, dtype));
    // In the launches below `x` holds `len` elements of `dtype` (Backend contract), and the
    // parameters' Rust type is `dtype`'s (matched on).
    match op {
        ParamOp::Pow(e) => {
            let work = (work.0, "pow", work.2);
            match e {
                // SAFETY: `pow_f32(const f32* x, f32 e, f32* out, u64 n)`, `x` an input of
                // `n` = `len` elements.
                Scalar::F32(e) if dtype == DType::F32 => unsafe {
                    b.produce(device, dtype, len, work, &[x], |out| args![xp, e, *out, n].to_vec())
                },
                // SAFETY: `pow_f64(const f64* x, f64 e, f64* out, u64 n)`, as above.
                Scalar::F64(e) if dtype == DType::F64 => unsafe {
                    b.produce(device, dtype, len, work, &[x], |out| args![xp, e, *out, n].to_vec())
                },
                _ if !dtype.is_float() => {
                    Err(Error::InvalidArgument { op: "pow", reason: format!("needs a float type, not {dtype}") })
                }
                _ => Err(mismatch("pow")),
            }
        }
        ParamOp::Clamp(lo, hi) => {
            let work = (work.0, "clamp", work.2);
            macro_rules! clamp {
                ($($d:ident),*) => {
                    match (lo, hi) {
                        // SAFETY: `clamp_{dtype}(const T* x, T lo, T hi, T* out, u64 n)`, with
                        // `lo` and `hi` of `dtype`'s type (matched) and `x` an input of
                        // `n` = `len` elements.
                        $((Scalar::$d(lo), Scalar::$d(hi)) if dtype == DType::$d => unsafe {
                            b.produce(device, dtype, len, work, &[x], |out| args![xp, lo, hi, *out, n].to_vec())
                        })*
                        _ => Err(mismatch("clamp")),
                    }
                };
            }
            clamp!(F32, F64, I32, U8)
        }
    }
}

pub(super) fn copy_blocks(
    b: &CudaBackend,
    device: DeviceId,
    dtype: DType,
    len: usize,
    parts: &[Blocks<'_>],
) -> Result<Buffer> {
    let inputs: Vec<&Buffer> = parts.iter().map(|p| p.src).collect();
    let (dev, s, out) = b.alloc(device, dtype, len, &inputs)?;
    let size = dtype.size() as u64;
    for p in parts {
        if p.count == 0 || p.block == 0 {
            continue;
        }
        let src = cuda(p.src)?.ptr() + p.src_offset as u64 * size;
        let dst = out.ptr() + p.dst_offset as u64 * size;
        let (count, block) = (p.count as u64, p.block as u64);
        if p.count == 1 || (p.src_stride == p.block && p.dst_stride == p.block) {
            // One contiguous run: a plain copy.
            // One contiguous run: a plain copy. The caller (the tensor layer) sized the part so that `count` runs of
            // `block` elements at `src_offset` lie within `p.src` and at `dst_offset` within `out` (`len` elements);
            // being one run (`count == 1` or both strides equal to `block`), that is `count * block` contiguous
            // elements on each side.
            // SAFETY: both ranges lie within their buffers (above); `p.src` is an input and `out` the new buffer,
            // distinct, both ready and kept alive on `s` (see `CudaBackend::alloc`).
            unsafe { CudaBackend::dtod(&s, dst, src, (count * block * size) as usize)? };
            continue;
        }
        let (ss, ds) = (p.src_stride as u64, p.dst_stride as u64);
        let f = dev.kernel(Source::Matrix, "copy_blocks", "", dtype)?;
        // `copy_blocks_{dtype}(const T* src, T* out, u64 count, u64 block, u64 src_stride, u64 dst_stride)`:
        // SAFETY: `count` runs of `block` elements, `ss` apart from `src` and `ds` apart from `dst`, all within `p.src`
        // and `out` (sized so by the tensor layer, as above), both ready and kept alive on `s`; the kernel bounds its
        // indices by `count * block`.
        unsafe {
            dev.launch(
                f,
                (dev.grid(count * block, 256), 1, 1),
                (256, 1, 1),
                s.raw.0,
                &mut args![src, dst, count, block, ss, ds],
            )?
        };
    }
    b.done(out)
}
