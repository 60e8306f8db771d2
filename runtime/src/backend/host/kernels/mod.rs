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

pub(in crate::backend) mod elementwise;
pub(in crate::backend) mod gather;
pub(in crate::backend) mod gemm;
pub(in crate::backend) mod init;
pub(in crate::backend) mod math;
pub(in crate::backend) mod matrix;
pub(in crate::backend) mod reduce;
pub(in crate::backend) mod select;
pub(in crate::backend) mod softmax;

use crate::backend::workers::split_mut;
use crate::backend::Blocks;
use crate::element::Element;
use crate::error::{Error, Result};

/// Elements of work (or bytes, for copies: [`COPY_GRAIN`]) below which a kernel runs on
/// one thread: waking a pool thread costs more than it saves on less.
pub(in crate::backend) const GRAIN: usize = 1 << 15;

/// Bytes below which a copy runs on one thread.
pub(in crate::backend) const COPY_GRAIN: usize = 1 << 18;

/// `f(x_part, out_part)` over matching parts of `x` and `out`, split over the pool.
pub(in crate::backend::host::kernels) fn map<T: Element, U: Element>(
    x: &[T],
    out: &mut [U],
    f: impl Fn(&[T], &mut [U]) + Sync,
) -> Result<()> {
    split_mut(out, 1, GRAIN, &|start, o| {
        let end = (start + o.len()).min(x.len());
        f(&x[start.min(end)..end], o);
        Ok(())
    })
}

/// `dst` made a copy of `src` (the same length), split over the pool when large.
pub(in crate::backend) fn copy(dst: &mut [u8], src: &[u8]) -> Result<()> {
    // SAFETY: `copy_into` writes only bytes of `src` through the view.
    copy_into(unsafe { crate::backend::transfer::as_uninit(dst) }, src)
}

/// [`copy`] into memory that may be uninitialized (a download into a fresh `Vec`'s
/// capacity): `Ok` means every byte of `dst` was written.
pub(in crate::backend) fn copy_into(dst: &mut [std::mem::MaybeUninit<u8>], src: &[u8]) -> Result<()> {
    if dst.len() != src.len() {
        return Err(Error::InvalidArgument { op: "copy", reason: format!("{} bytes into {}", src.len(), dst.len()) });
    }
    split_mut(dst, 1, COPY_GRAIN, &|start, d| {
        crate::backend::transfer::write_bytes(d, &src[start..start + d.len()]);
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

/// Copies every part's blocks (`geometry[i]` from `srcs[i]`) into `dst`, zeroed first
/// when the parts leave `gaps` (elements no part writes are zeros).
pub(in crate::backend) fn copy_parts(
    dst: &mut [u8],
    srcs: &[&[u8]],
    size: usize,
    geometry: &[Geometry],
    gaps: bool,
) -> Result<()> {
    if gaps {
        dst.fill(0);
    }
    srcs.iter().zip(geometry).try_for_each(|(src, g)| copy_blocks(dst, src, size, g))
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
