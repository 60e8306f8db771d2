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
    let (a, o, n) = (cuda(rhs).ptr(), out.ptr(), len as u64);
    let grid = dev.grid_full(vector_work(n, dtype), 256);
    b.with_div_check(
        &s,
        check,
        |err| with_scalar!(lhs, v => dev.launch(f, (grid, 1, 1), (256, 1, 1), s.raw.0, &mut args![a, v, o, n, err])),
    )?;
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
    let (xp, n) = (cuda(x).ptr(), len as u64);
    let work = (Source::Elementwise, "", vector_work(n, dtype));
    match op {
        ParamOp::Pow(e) => {
            let work = (work.0, "pow", work.2);
            match e {
                Scalar::F32(e) if dtype == DType::F32 => {
                    b.produce(device, dtype, len, work, &[x], |out| args![xp, e, *out, n].to_vec())
                }
                Scalar::F64(e) if dtype == DType::F64 => {
                    b.produce(device, dtype, len, work, &[x], |out| args![xp, e, *out, n].to_vec())
                }
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
                        $((Scalar::$d(lo), Scalar::$d(hi)) if dtype == DType::$d => {
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
        let src = cuda(p.src).ptr() + p.src_offset as u64 * size;
        let dst = out.ptr() + p.dst_offset as u64 * size;
        let (count, block) = (p.count as u64, p.block as u64);
        if p.count == 1 || (p.src_stride == p.block && p.dst_stride == p.block) {
            // One contiguous run: a plain copy.
            CudaBackend::dtod(&s, dst, src, (count * block * size) as usize)?;
            continue;
        }
        let (ss, ds) = (p.src_stride as u64, p.dst_stride as u64);
        let f = dev.kernel(Source::Matrix, "copy_blocks", "", dtype)?;
        dev.launch(
            f,
            (dev.grid(count * block, 256), 1, 1),
            (256, 1, 1),
            s.raw.0,
            &mut args![src, dst, count, block, ss, ds],
        )?;
    }
    b.done(out)
}
