//! LayerNorm forward and backward, kernels of softmax.cu. Each row goes to a warp up to
//! 1024 elements, else to a block of whole warps (`softmax::row_groups`), and the forward
//! applies the weight and bias in the same pass. The backward is two launches with a
//! weight: the input's gradient, which also writes each row's mean and rstd, then the
//! weight's and bias's gradients (sums over the rows) in tiles of 32 columns, as the
//! column sums of `reduce` (a third launch adds the segments of long columns).

use locus_kernels::Source;

use super::reduce::ColumnTiles;
use super::softmax::row_groups;
use crate::backend::cuda::driver::buffer::CudaBuffer;
use crate::backend::cuda::driver::launch::KernelArgs;
use crate::backend::cuda::driver::memory::{alloc, done};
use crate::backend::{float_only, Norm, NormGrads};
use crate::element::DType;
use crate::error::Result;

/// Each of `rows` rows of `len` elements of `x` normalised, then times the weight plus the
/// bias of `affine` (`len` elements each) when given.
pub(in crate::backend::cuda) fn forward(
    x: &CudaBuffer,
    affine: Option<(&CudaBuffer, &CudaBuffer)>,
    dtype: DType,
    Norm { rows, len, eps }: Norm,
) -> Result<CudaBuffer> {
    float_only("layer_norm", dtype)?;
    let dev = x.device();
    let (s, out) = match affine {
        Some((w, b)) => alloc(dev, dtype, rows * len, &[x, w, b])?,
        None => alloc(dev, dtype, rows * len, &[x])?,
    };
    if rows * len == 0 {
        return done(out);
    }
    let (n, l) = (rows as u64, len as u64);
    let (variant, grid, block) = row_groups(dev, n, l);
    let f = dev.kernel(Source::Softmax, "layer_norm", variant, dtype)?;
    let (w, b) = (affine.map(|a| a.0), affine.map(|a| a.1));
    let args = KernelArgs::new().ptr(x).ptr_or_null(w).ptr_or_null(b).ptr(&out).u64(n).u64(l).f64(eps);
    // `layer_norm_{warp,block}_{dtype}(const T* x, const T* w, const T* b, T* y, u64 rows, u64 len, f64 eps)`:
    // `x` and `out` hold `rows * len` elements of `dtype`, the weight and bias (both or neither, else null) `len`
    // each (the caller's contract and `alloc`), all ready and kept alive on `s`; the warp kernels get blocks of
    // `(32, WARP_ROWS)`, the block kernels whole warps, at most 1024 threads (their launch bounds), and every
    // access is bounded by the counts.
    // SAFETY: for the reasons in the comment just above.
    unsafe { dev.launch(f, (grid, 1, 1), block, &s, args)? };
    done(out)
}

/// The gradients of [`forward`] at `x` given `grad`: with respect to `x`, and with the
/// forward's `weight`, with respect to the weight and the bias.
pub(in crate::backend::cuda) fn backward(
    x: &CudaBuffer,
    grad: &CudaBuffer,
    weight: Option<&CudaBuffer>,
    dtype: DType,
    Norm { rows, len, eps }: Norm,
) -> Result<NormGrads<CudaBuffer>> {
    float_only("layer_norm", dtype)?;
    let dev = x.device();
    let (s, dx) = match weight {
        Some(w) => alloc(dev, dtype, rows * len, &[x, grad, w])?,
        None => alloc(dev, dtype, rows * len, &[x, grad])?,
    };
    let params = match weight {
        Some(_) => {
            Some((CudaBuffer::alloc(dev, &s, len * dtype.size())?, CudaBuffer::alloc(dev, &s, len * dtype.size())?))
        }
        None => None,
    };
    let (n, l) = (rows as u64, len as u64);
    // The rows' mean and rstd in the kernels' accumulator type (f64 for f64, else f32),
    // written by the first launch and read by the second.
    let acc = if dtype == DType::F64 { 8 } else { 4 };
    let stats = match weight {
        Some(_) => Some(CudaBuffer::alloc(dev, &s, rows * 2 * acc)?),
        None => None,
    };
    if rows * len > 0 {
        let (groups, grid, block) = row_groups(dev, n, l);
        let variant = if groups == "warp" { "back_warp" } else { "back_block" };
        let f = dev.kernel(Source::Softmax, "layer_norm", variant, dtype)?;
        let args = KernelArgs::new().ptr(x).ptr(grad).ptr_or_null(weight).ptr(&dx).ptr_or_null(stats.as_ref());
        // `layer_norm_back_{warp,block}_{dtype}(const T* x, const T* g, const T* w, T* dx, A* stats, u64 rows, u64
        // len, f64 eps)`: `x`, `grad` and `dx` hold `rows * len` elements of `dtype`, the weight (or null) `len`, and
        // `stats` (or null) `2 * rows` accumulators of `acc` bytes (the kernel's `A`), allocated on `s`, where all
        // are ready and kept alive; the geometry is `forward`'s, and every access is bounded by the counts.
        // SAFETY: for the reasons in the comment just above.
        unsafe { dev.launch(f, (grid, 1, 1), block, &s, args.u64(n).u64(l).f64(eps))? };
    }
    let (Some((dw, db)), Some(stats)) = (params, stats) else {
        return Ok((done(dx)?, None));
    };
    // Over no rows the kernel writes zeros (sums of nothing) and reads no statistics.
    let ColumnTiles { chunk, nchunks, grid } = ColumnTiles::plan(dev, l.div_ceil(32), n);
    let f = dev.kernel(Source::Softmax, "layer_norm", "params", dtype)?;
    let partial = match nchunks {
        1 => None,
        _ => Some(CudaBuffer::alloc(dev, &s, (l * nchunks) as usize * 2 * 8)?),
    };
    let args = KernelArgs::new().ptr(x).ptr(grad).ptr(&stats).ptr(&dw).ptr(&db).u64(n).u64(l);
    let args = args.u64(chunk).u64(nchunks).ptr_or_null(partial.as_ref());
    // `layer_norm_params_{dtype}(const T* x, const T* g, const A* stats, T* dw, T* db, u64 rows, u64 len, u64 chunk,
    // u64 nchunks, f64* partial)`: `x` and `grad` hold `rows * len` elements, `stats` the `2 * rows` accumulators the
    // launch above wrote on `s`, `dw` and `db` `len` elements each; with several segments `partial` holds `2 * len *
    // nchunks` f64 (segment s of column c writes its two sums at `2 * (c * nchunks + s)`), else it is null and
    // unread; all allocated on or ready on `s`. Blocks of 32 x 32 threads (`ColumnTiles::BLOCK`, the kernel's launch
    // bound), every access bounded by the counts.
    // SAFETY: for the reasons in the comment just above.
    unsafe { dev.launch(f, (grid, 1, 1), (ColumnTiles::BLOCK, 1, 1), &s, args)? };
    if let Some(partial) = &partial {
        let f = dev.kernel(Source::Softmax, "layer_norm", "params_final", dtype)?;
        let args = KernelArgs::new().ptr(partial).ptr(&dw).ptr(&db).u64(l).u64(nchunks);
        // SAFETY: `layer_norm_params_final_{dtype}(const f64* partial, T* dw, T* db, u64 len, u64 nchunks)`: the
        // `2 * len * nchunks` sums written just before on `s`, into the `len` elements of `dw` and `db`.
        unsafe { dev.launch(f, (dev.grid(l, 256), 1, 1), (256, 1, 1), &s, args)? };
    }
    Ok((done(dx)?, Some((done(dw)?, done(db)?))))
}
