//! Reductions (`sum`, `mean`, `max`, the sum of squares) over one dim, kernels of reduce.cu. A whole-tensor
//! reduction runs in one block when small, else in two launches through per-block
//! partial results; a reduction over the last dim gives each row to a block, and one over
//! an inner dim gives each output element to a thread, or, when the outputs are few and
//! the columns long, tiles of 32 columns (and segments of the columns) to blocks.

use locus_kernels::Source;

use crate::backend::cuda::driver::buffer::CudaBuffer;
use crate::backend::cuda::driver::device::DeviceState;
use crate::backend::cuda::driver::launch::KernelArgs;
use crate::backend::cuda::driver::memory::{alloc, done};
use crate::backend::{float_only, ReduceKind};
use crate::element::DType;
use crate::error::Result;
use crate::shape::Reduction;

/// `op` of `x` over the dim `r` describes.
pub(in crate::backend::cuda) fn reduce(
    x: &CudaBuffer,
    op: ReduceKind,
    dtype: DType,
    r: Reduction,
) -> Result<CudaBuffer> {
    let opname = match op {
        ReduceKind::Sum => "sum",
        ReduceKind::Mean => "mean",
        ReduceKind::Max => "max",
        ReduceKind::SumSquares => "sumsq",
    };
    if op.float_only() {
        float_only(op.name(), dtype)?;
    }
    let dev = x.device();
    let (stream, out) = alloc(dev, dtype, r.out_len(), &[x])?;
    if r.out_len() == 0 {
        return done(out);
    }
    let k = |variant: &'static str| dev.kernel(Source::Reduce, opname, variant, dtype);
    let (xb, s) = (x, &stream);
    let (outer, len, inner) = (r.outer as u64, r.len as u64, r.inner as u64);
    // In every launch below `x` holds `outer * len * inner` elements of `dtype` and
    // `out` `outer * inner` (= `r.out_len()`), both ready and kept alive on `stream`
    // (see `alloc`); the kernels bound their accesses by these counts.
    if outer == 1 && inner == 1 {
        if len <= 1 << 16 {
            let args = KernelArgs::new().ptr(xb).u64(len).ptr(&out);
            // SAFETY: `{op}_single_{dtype}(const T* x, u64 n, T* out)`: `len` elements of
            // `x` into the one element of `out`.
            unsafe { dev.launch(k("single")?, (1, 1, 1), (1024, 1, 1), s, args)? };
        } else {
            let acc = accumulator_bytes(op, dtype);
            let blocks = dev.grid(len.div_ceil(16 / dtype.size() as u64), 256);
            let partial = CudaBuffer::alloc(dev, &stream, blocks as usize * acc)?;
            let args = KernelArgs::new().ptr(xb).u64(len).ptr(&partial);
            // SAFETY: `{op}_partial_{dtype}(const T* x, u64 n, A* partial)`: one accumulator per block into
            // `partial`, which holds `blocks` accumulators of `acc` bytes (the kernel's `A`: f64 for float sums and
            // means, f64 or i64 max, u64 for i64 sums, else 4 bytes), allocated on `stream` and freed there after both launches.
            unsafe { dev.launch(k("partial")?, (blocks, 1, 1), (256, 1, 1), s, args)? };
            let args = KernelArgs::new().ptr(&partial).u64(blocks as u64).ptr(&out).u64(len);
            // SAFETY: `{op}_final_{dtype}(const A* partial, u64 nparts, T* out, u64 len)`:
            // the `nparts` = `blocks` accumulators written just before on `stream`, into
            // the one element of `out`.
            unsafe { dev.launch(k("final")?, (1, 1, 1), (1024, 1, 1), s, args)? };
        }
    } else if inner == 1 {
        let grid = outer.min(dev.sm_count as u64 * 16) as u32;
        let args = KernelArgs::new().ptr(xb).ptr(&out).u64(outer).u64(len);
        // SAFETY: `{op}_rows_{dtype}(const T* x, T* out, u64 outer, u64 len)`: `outer`
        // rows of `len` elements of `x`, one result each into `out` (`outer` elements).
        unsafe { dev.launch(k("rows")?, (grid, 1, 1), (256, 1, 1), s, args)? };
    } else if outer * inner < dev.sm_count.max(1) as u64 * 256 && len >= 32 {
        // Few outputs over long columns: tiles of 32 columns (and segments of `len`, whose
        // results a second launch adds).
        let ColumnTiles { chunk, nchunks, grid } = ColumnTiles::plan(dev, outer * inner.div_ceil(32), len);
        let outputs = outer * inner;
        let args = KernelArgs::new().ptr(xb).u64(outer).u64(len).u64(inner).u64(chunk).u64(nchunks);
        if nchunks == 1 {
            // `{op}_tile_{dtype}(const T* x, u64 outer, u64 len, u64 inner, u64 chunk, u64 nchunks, T* out,
            // A* partial)` with one segment: each block reads a tile of columns (below `inner`) of the rows of one of
            // the `outer` slices and writes their results into `out` (`outer * inner`); `partial` is null, unread.
            // SAFETY: for the reasons in the comment just above.
            unsafe {
                dev.launch(k("tile")?, (grid, 1, 1), (ColumnTiles::BLOCK, 1, 1), s, args.ptr(&out).ptr_or_null(None))?
            };
        } else {
            let acc = accumulator_bytes(op, dtype);
            let partial = CudaBuffer::alloc(dev, &stream, (outputs * nchunks) as usize * acc)?;
            // As above with `nchunks` segments of `chunk` rows: `out` is not written; segment `s` of column
            // `c` of slice `o` writes accumulator `(o * inner + c) * nchunks + s` of `partial`, which holds
            // `outputs * nchunks` accumulators of the kernel's `A` (`acc` bytes, as for `partial` above),
            // allocated on `stream` and freed there after the launch below.
            // SAFETY: for the reasons in the comment just above.
            unsafe {
                dev.launch(k("tile")?, (grid, 1, 1), (ColumnTiles::BLOCK, 1, 1), s, args.ptr(&out).ptr(&partial))?
            };
            let args = KernelArgs::new().ptr(&partial).u64(outputs).u64(nchunks).u64(len).ptr(&out);
            // SAFETY: `{op}_tilefinal_{dtype}(const A* partial, u64 outputs, u64 nchunks, u64 len, T* out)`: the
            // `outputs * nchunks` accumulators written just before on `stream`, into the `outputs` of `out`.
            unsafe { dev.launch(k("tilefinal")?, (dev.grid(outputs, 256), 1, 1), (256, 1, 1), s, args)? };
        }
    } else {
        let grid = dev.grid(outer * inner, 256);
        let args = KernelArgs::new().ptr(xb).ptr(&out).u64(outer).u64(len).u64(inner);
        // SAFETY: `{op}_cols_{dtype}(const T* x, T* out, u64 outer, u64 len, u64 inner)`:
        // `x` as `[outer, len, inner]`, reduced over `len` into `out` (`outer * inner`).
        unsafe { dev.launch(k("cols")?, (grid, 1, 1), (256, 1, 1), s, args)? };
    }
    done(out)
}

/// How the column-tile kernels (`{op}_tile` here, `layer_norm_params` of softmax.cu) cut a
/// reduction over `len` rows of `tiles` tiles of 32 columns: blocks of 32 x 32 threads,
/// each a tile and one segment of `chunk` rows; when the tiles are too few to fill the
/// device, `len` is cut into `nchunks` segments of at least 512 rows (16 per thread), and
/// a second launch adds each output's segments in order.
pub(super) struct ColumnTiles {
    pub(super) chunk: u64,
    pub(super) nchunks: u64,
    pub(super) grid: u32,
}

impl ColumnTiles {
    /// Threads per block: 32 columns by 32 rows.
    pub(super) const BLOCK: u32 = 1024;

    pub(super) fn plan(dev: &DeviceState, tiles: u64, len: u64) -> ColumnTiles {
        let fill = dev.sm_count.max(1) as u64 * 2;
        let nchunks = fill.div_ceil(tiles.max(1)).min(len.div_ceil(512)).max(1);
        let chunk = len.div_ceil(nchunks).max(1);
        let nchunks = len.div_ceil(chunk).max(1);
        ColumnTiles { chunk, nchunks, grid: (tiles * nchunks).clamp(1, fill * 8) as u32 }
    }
}

/// The width of the kernels' accumulator `A`: f64 for float sums and means, the type itself
/// for f64 max and the unsigned 64-bit sum or the max of i64, else 4 bytes.
fn accumulator_bytes(op: ReduceKind, dtype: DType) -> usize {
    if op != ReduceKind::Max && dtype.is_float() || dtype.size() == 8 {
        8
    } else {
        4
    }
}
