//! The ops that move elements between positions: (batched) transposes, concatenation,
//! slices and strided block copies (narrow, select, cat and stack along any dim).
//! Contiguous runs are plain device-to-device copies; only strided ones launch a kernel,
//! and a copy with zeros around it (a narrow's gradient) one padding kernel.
//! Matrix products are in `gemm`, permutations of dims in `permute`.

use cudarc::driver::result;
use locus_kernels::Source;

use crate::backend::cuda::driver::buffer::CudaBuffer;
use crate::backend::cuda::driver::device::{driver, DeviceState};
use crate::backend::cuda::driver::launch::KernelArgs;
use crate::backend::cuda::driver::memory::{alloc, done};
use crate::backend::cuda::CudaBackend;
use crate::backend::Blocks;
use crate::element::DType;
use crate::error::{Error, Result};

/// The `[cols, rows]` transpose of the row-major `[rows, cols]` matrix `x`.
pub(in crate::backend::cuda) fn transpose(
    x: &CudaBuffer,
    dtype: DType,
    rows: usize,
    cols: usize,
) -> Result<CudaBuffer> {
    transpose_batch(x, dtype, 1, rows, cols)
}

/// `batch` row-major `[rows, cols]` matrices of `x`, one after another, each as its
/// `[cols, rows]` transpose.
pub(in crate::backend::cuda) fn transpose_batch(
    x: &CudaBuffer,
    dtype: DType,
    batch: usize,
    rows: usize,
    cols: usize,
) -> Result<CudaBuffer> {
    let dev = x.device();
    let len = batch.checked_mul(rows).and_then(|r| r.checked_mul(cols)).ok_or_else(|| Error::InvalidArgument {
        op: "transpose",
        reason: format!("{batch} matrices of [{rows}, {cols}] are too many elements"),
    })?;
    let (s, out) = alloc(dev, dtype, len, &[x])?;
    if len == 0 {
        return done(out);
    }
    // The kernel loops over the tiles along rows (y) and over the batch (z).
    let (gx, gy, gz) = (cols.div_ceil(32), rows.div_ceil(32).min(65535), batch.min(65535));
    if gx > i32::MAX as usize {
        return Err(Error::InvalidArgument { op: "transpose", reason: format!("[{rows}, {cols}] is too large") });
    }
    let args = KernelArgs::new().ptr(x).ptr(&out).u64(rows as u64).u64(cols as u64).u64(batch as u64);
    let f = dev.kernel(Source::Matrix, "transpose", "", dtype)?;
    // SAFETY: `transpose_{dtype}(const T* x, T* out, u64 rows, u64 cols, u64 batch)`: `x`
    // and `out` each hold `batch * rows * cols` elements of `dtype`, ready and kept alive
    // on `s` (see `alloc`); the kernel bounds its indices by `rows`, `cols` and `batch`.
    unsafe { dev.launch(f, (gx as u32, gy as u32, gz as u32), (32, 8, 1), &s, args)? };
    done(out)
}

/// The parts' elements one after another (each part is `(buffer, its length)`), on
/// `dev`.
pub(in crate::backend::cuda) fn concat(
    dev: &'static DeviceState,
    dtype: DType,
    parts: &[(&CudaBuffer, usize)],
) -> Result<CudaBuffer> {
    let len = parts.iter().map(|p| p.1).sum();
    let inputs: Vec<&CudaBuffer> = parts.iter().map(|p| p.0).collect();
    let (s, out) = alloc(dev, dtype, len, &inputs)?;
    let mut at = out.ptr();
    for &(part, _) in parts {
        // SAFETY: `out` holds the sum of the parts' lengths, so `at .. at + part.bytes()`
        // (the running offset) lies within it; `part` is a distinct input buffer of
        // `part.bytes()` bytes; both ready and kept alive on `s` (see `alloc`).
        unsafe { CudaBackend::dtod(&s, at, part.ptr(), part.bytes())? };
        at += part.bytes() as u64;
    }
    done(out)
}

/// Elements `offset .. offset + len` of `x`.
pub(in crate::backend::cuda) fn slice(x: &CudaBuffer, dtype: DType, offset: usize, len: usize) -> Result<CudaBuffer> {
    let (s, out) = alloc(x.device(), dtype, len, &[x])?;
    let src = x.ptr() + (offset * dtype.size()) as u64;
    // SAFETY: the caller checked `offset + len` against `x`'s length (Backend
    // contract), so the source range lies within `x`; `out` holds `len` elements; both
    // are ready and kept alive on `s` (see `alloc`), in distinct allocations.
    unsafe { CudaBackend::dtod(&s, out.ptr(), src, len * dtype.size())? };
    done(out)
}

/// A new buffer of `len` elements on `dev`, each part's runs of elements copied into it,
/// zeros where no part writes: one padding kernel for a single part of contiguous blocks
/// spaced evenly over the whole buffer (a narrow's gradient), else zeros first.
pub(in crate::backend::cuda) fn copy_blocks(
    dev: &'static DeviceState,
    dtype: DType,
    len: usize,
    parts: &[Blocks<'_, CudaBuffer>],
) -> Result<CudaBuffer> {
    let inputs: Vec<&CudaBuffer> = parts.iter().map(|p| p.src).collect();
    let (s, out) = alloc(dev, dtype, len, &inputs)?;
    let size = dtype.size() as u64;
    let covered: usize = parts.iter().map(|p| p.count * p.block).sum();
    if covered < len {
        if let [p] = parts {
            let (count, block, ds) = (p.count as u64, p.block as u64, p.dst_stride as u64);
            if p.src_stride == p.block && p.count * p.dst_stride == len && p.dst_offset + p.block <= p.dst_stride {
                let f = dev.kernel(Source::Matrix, "pad_blocks", "", dtype)?;
                let src_at = p.src_offset as u64 * size;
                let args = KernelArgs::new().ptr_at(p.src, src_at).ptr(&out).u64(count).u64(block).u64(ds);
                // `pad_blocks_{dtype}(const T* src, T* out, u64 count, u64 block, u64 dst_stride, u64 at)`:
                // `count` contiguous blocks of `block` elements from `src_offset` lie within `p.src` (the
                // tensor layer sized the part so); the kernel writes the `count * dst_stride` = `len` elements of
                // `out`, reading block `b` at `j - at` only for `at <= j < at + block`; both buffers are ready and
                // kept alive on `s` (see `alloc`).
                // SAFETY: for the reasons in the comment just above.
                unsafe {
                    dev.launch(f, (dev.grid(len as u64, 256), 1, 1), (256, 1, 1), &s, args.u64(p.dst_offset as u64))?
                };
                return done(out);
            }
        }
        // SAFETY: `out` is the new buffer of `len * size` bytes, allocated on `s`, where the copies below follow.
        unsafe { result::memset_d8_async(out.ptr(), 0, len * size as usize, s.raw.0) }
            .map_err(driver(dev.ordinal, "cuMemsetD8Async"))?;
    }
    for p in parts {
        if p.count == 0 || p.block == 0 {
            continue;
        }
        let (src, src_at) = (p.src, p.src_offset as u64 * size);
        let dst_at = p.dst_offset as u64 * size;
        let (count, block) = (p.count as u64, p.block as u64);
        if p.count == 1 || (p.src_stride == p.block && p.dst_stride == p.block) {
            // One contiguous run: a plain copy. The caller (the tensor layer) sized the part so that `count` runs of
            // `block` elements at `src_offset` lie within `p.src` and at `dst_offset` within `out` (`len` elements);
            // being one run (`count == 1` or both strides equal to `block`), that is `count * block` contiguous
            // elements on each side.
            // SAFETY: both ranges lie within their buffers (above); `p.src` is an input and `out` the new buffer,
            // distinct, both ready and kept alive on `s` (see `alloc`).
            unsafe { CudaBackend::dtod(&s, out.ptr() + dst_at, src.ptr() + src_at, (count * block * size) as usize)? };
            continue;
        }
        let (ss, ds) = (p.src_stride as u64, p.dst_stride as u64);
        let f = dev.kernel(Source::Matrix, "copy_blocks", "", dtype)?;
        let args = KernelArgs::new().ptr_at(src, src_at).ptr_at(&out, dst_at).u64(count).u64(block).u64(ss).u64(ds);
        // `copy_blocks_{dtype}(const T* src, T* out, u64 count, u64 block, u64 src_stride, u64 dst_stride)`:
        // SAFETY: `count` runs of `block` elements, `ss` apart from `src` and `ds` apart from `dst`, all within `p.src`
        // and `out` (sized so by the tensor layer, as above), both ready and kept alive on `s`; the kernel bounds its
        // indices by `count * block`.
        unsafe { dev.launch(f, (dev.grid(count * block, 256), 1, 1), (256, 1, 1), &s, args)? };
    }
    done(out)
}
