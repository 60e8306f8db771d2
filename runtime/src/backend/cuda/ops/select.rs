//! Comparisons (`u8` results), `where`, and `argmax` / `max_dim` over one dim: kernels of
//! select.cu. Same-shape operands take vectorised kernels, broadcast ones a kernel that
//! walks per-operand strides ([`Bcast3`]). `argmax` over the last dim gives each row to a
//! warp (rows of up to [`WARP_ROW`] elements) or a block, with 16-byte loads; a few long
//! rows are cut into segments, one block each, whose candidates a second launch combines.
//! Over any other dim a block takes a tile of 32 columns (and, when tiles are few, a
//! segment of the dim), reading whole rows of the tile per warp.

use locus_kernels::Source;

use crate::backend::cuda::driver::buffer::CudaBuffer;
use crate::backend::cuda::driver::launch::{flat_grid, vector_work, KernelArg, KernelArgs};
use crate::backend::cuda::driver::memory::{alloc, done};
use crate::backend::cuda::ops::elementwise::scalar_dtype;
use crate::backend::CompareOp;
use crate::element::{DType, Scalar};
use crate::error::{Error, Result};
use crate::shape::{Layout, Reduction};

/// Up to 8 dims and the strides of up to three operands over them (0 where one is
/// broadcast); matches `Bcast3` in select.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct Bcast3 {
    rank: i32,
    shape: [u64; 8],
    s: [[u64; 8]; 3],
}

/// `#[repr(C)]` with the kernel's field order and types: `int`, `u64[8]`, `u64[3][8]`.
impl KernelArg for Bcast3 {}

/// Drops dims of 1 and merges neighbouring dims that every operand walks contiguously,
/// then packs them; more than 8 dims left is an error naming `op`.
fn bcast3(op: &'static str, shape: &[usize], strides: &[&[usize]]) -> Result<Bcast3> {
    let mut dims: Vec<(u64, [u64; 3])> = Vec::new();
    for (d, &n) in shape.iter().enumerate() {
        if n == 1 {
            continue;
        }
        let mut s = [0u64; 3];
        for (k, st) in strides.iter().enumerate() {
            s[k] = st[d] as u64;
        }
        let n = n as u64;
        match dims.last_mut() {
            Some((m, last)) if (0..3).all(|k| last[k] == s[k] * n) => (*m, *last) = (*m * n, s),
            _ => dims.push((n, s)),
        }
    }
    if dims.len() > 8 {
        return Err(Error::InvalidArgument {
            op,
            reason: format!("broadcasting over {} non-mergeable dims; the cuda backend takes at most 8", dims.len()),
        });
    }
    let mut b = Bcast3 { rank: dims.len() as i32, shape: [1; 8], s: [[0; 8]; 3] };
    for (d, (n, s)) in dims.into_iter().enumerate() {
        b.shape[d] = n;
        for (dst, &st) in b.s.iter_mut().zip(&s) {
            dst[d] = st;
        }
    }
    Ok(b)
}

/// Threads per block of every kernel here (a multiple of 32: the warp-level ones rely on
/// whole warps).
const BLOCK: u32 = 256;

/// `lhs op rhs` as `u8` 1 or 0 into a new buffer of `out_shape`.
pub(in crate::backend::cuda) fn compare(
    lhs: &CudaBuffer,
    rhs: &CudaBuffer,
    op: CompareOp,
    dtype: DType,
    out_shape: &[usize],
    layout: &Layout,
) -> Result<CudaBuffer> {
    let len: usize = out_shape.iter().product();
    let dev = lhs.device();
    let (s, out) = alloc(dev, DType::U8, len, &[lhs, rhs])?;
    if len == 0 {
        return done(out);
    }
    let n = len as u64;
    let args = KernelArgs::new().ptr(lhs).ptr(rhs).ptr(&out).u64(n);
    let bc = match layout {
        Layout::Same => None,
        Layout::RhsScalar => Some(bcast3(op.name(), &[len], &[&[1], &[0]])?),
        Layout::LhsScalar => Some(bcast3(op.name(), &[len], &[&[0], &[1]])?),
        Layout::Strided { lhs, rhs } => Some(bcast3(op.name(), out_shape, &[lhs, rhs])?),
    };
    match bc {
        None => {
            let f = dev.kernel(Source::Select, op.name(), "same", dtype)?;
            let grid = dev.grid(n.div_ceil(16 / dtype.size() as u64), BLOCK);
            // `{op}_same_{T}(const T* a, const T* b, u8* out, u64 n)`:
            // SAFETY: `lhs` and `rhs` hold `n` = `len` elements of `dtype` (equal shapes), `out` `n` bytes, ready and
            // kept alive on `s` (see `alloc`); the kernel bounds every access by `n`.
            unsafe { dev.launch(f, (grid, 1, 1), (BLOCK, 1, 1), &s, args)? }
        }
        Some(bc) => {
            let f = dev.kernel(Source::Select, op.name(), "bcast", dtype)?;
            // `{op}_bcast_{T}(const T* a, const T* b, u8* out, u64 n, Bcast3 bc)`:
            // SAFETY: `out` holds `n` = `len` bytes; `bc` is the `#[repr(C)]` mirror of the kernel's `Bcast3`, built from
            // the checked broadcast strides of both operands over `out_shape`, so every offset it yields lies within
            // `lhs` and `rhs`, ready and kept alive on `s` (see `alloc`).
            unsafe { dev.launch(f, (dev.grid(n, BLOCK), 1, 1), (BLOCK, 1, 1), &s, args.val(bc))? }
        }
    }
    done(out)
}

/// `x[i] op value` as `u8` 1 or 0 for the `len` elements of `x`.
pub(in crate::backend::cuda) fn compare_scalar(
    x: &CudaBuffer,
    op: CompareOp,
    dtype: DType,
    len: usize,
    value: Scalar,
) -> Result<CudaBuffer> {
    if scalar_dtype(value) != dtype {
        return Err(Error::InvalidArgument { op: op.name(), reason: format!("a scalar of another type than {dtype}") });
    }
    let dev = x.device();
    let (s, out) = alloc(dev, DType::U8, len, &[x])?;
    if len == 0 {
        return done(out);
    }
    let n = len as u64;
    let f = dev.kernel(Source::Select, op.name(), "scalar", dtype)?;
    let grid = dev.grid(n.div_ceil(16 / dtype.size() as u64), BLOCK);
    let args = KernelArgs::new().ptr(x).scalar(value).ptr(&out).u64(n);
    // `{op}_scalar_{T}(const T* a, T s, u8* out, u64 n)`:
    // SAFETY: `x` holds `n` = `len` elements of `dtype` and `out` `n` bytes, ready and kept alive on `s` (see
    // `alloc`); `value` has `dtype`'s type (checked above); the kernel bounds every access by `n`.
    unsafe { dev.launch(f, (grid, 1, 1), (BLOCK, 1, 1), &s, args)? };
    done(out)
}

/// `a` where the `u8` `mask` is not 0, else `b`, into a new buffer of `out_shape`.
pub(in crate::backend::cuda) fn select_where(
    mask: &CudaBuffer,
    a: &CudaBuffer,
    b: &CudaBuffer,
    dtype: DType,
    out_shape: &[usize],
    strides: [&[usize]; 3],
) -> Result<CudaBuffer> {
    let len: usize = out_shape.iter().product();
    let dev = mask.device();
    let (s, out) = alloc(dev, dtype, len, &[mask, a, b])?;
    if len == 0 {
        return done(out);
    }
    let n = len as u64;
    let bc = bcast3("where", out_shape, &strides)?;
    let args = KernelArgs::new().ptr(mask).ptr(a).ptr(b).ptr(&out).u64(n);
    // Merged into one dim that all three walk with stride 1 (or no dim: one element).
    let same = bc.rank == 0 || (bc.rank == 1 && bc.s.iter().all(|st| st[0] == 1));
    if same {
        let f = dev.kernel(Source::Select, "where", "same", dtype)?;
        // Enough threads for each to take WHERE_UNROLL vectors once, as the grids of the
        // elementwise kernels are.
        let grid = flat_grid(vector_work(n, dtype), BLOCK);
        // `where_same_{T}(const u8* m, const T* a, const T* b, T* out, u64 n)`:
        // SAFETY: the mask (`n` bytes), `a`, `b` and `out` (`n` elements of `dtype` each) have the output's shape
        // (all strides 1 over one merged dim), ready and kept alive on `s` (see `alloc`); accesses are bounded by `n`.
        unsafe { dev.launch(f, (grid, 1, 1), (BLOCK, 1, 1), &s, args)? };
    } else {
        let f = dev.kernel(Source::Select, "where", "bcast", dtype)?;
        // `where_bcast_{T}(const u8* m, const T* a, const T* b, T* out, u64 n, Bcast3 bc)`:
        // SAFETY: `out` holds `n` = `len` elements; `bc` mirrors the kernel's `Bcast3`, built from the checked
        // broadcast strides of the mask, `a` and `b` over `out_shape`, so every offset lies within its operand;
        // all are ready and kept alive on `s` (see `alloc`).
        unsafe { dev.launch(f, (dev.grid(n, BLOCK), 1, 1), (BLOCK, 1, 1), &s, args.val(bc))? };
    }
    done(out)
}

/// The outputs of `argmax`, marked written.
fn finish(idx: CudaBuffer, vals: Option<CudaBuffer>) -> Result<(CudaBuffer, Option<CudaBuffer>)> {
    Ok((done(idx)?, vals.map(done).transpose()?))
}

/// Rows of the last dim up to this long go to one warp each; longer ones to a block.
const WARP_ROW: u64 = 1024;

/// Rows at least this long, when there are too few of them to fill the device, are cut
/// into segments of at least this many elements, one block each.
const SEGMENT: u64 = 16384;

/// Over the dim `r` describes: the `i32` index of the first maximum (NaN wins), and with
/// `values` the element there.
pub(in crate::backend::cuda) fn argmax(
    x: &CudaBuffer,
    dtype: DType,
    r: Reduction,
    values: bool,
) -> Result<(CudaBuffer, Option<CudaBuffer>)> {
    let dev = x.device();
    let (s, idx) = alloc(dev, DType::I32, r.out_len(), &[x])?;
    let vals = if values { Some(CudaBuffer::alloc(dev, &s, r.out_len() * dtype.size())?) } else { None };
    if r.out_len() == 0 {
        return finish(idx, vals);
    }
    if r.len == 0 || r.len > i32::MAX as usize {
        return Err(Error::InvalidArgument {
            op: "argmax",
            reason: format!("a reduction over {} elements (needs 1 to i32::MAX)", r.len),
        });
    }
    let k = |variant: &'static str| dev.kernel(Source::Select, "argmax", variant, dtype);
    let (outer, len, inner) = (r.outer as u64, r.len as u64, r.inner as u64);
    let (xb, v) = (x, vals.as_ref());
    // In every launch below `x` holds `outer * len * inner` elements of `dtype`, `idx`
    // `outer * inner` i32 and `vals`, when there, `outer * inner` elements of `dtype`
    // (allocated above on `s`, to which `alloc` made `x` ready and tied its lifetime).
    let blocks_to_fill = dev.sm_count.max(1) as u64 * 8;
    if inner > 1 {
        // Tiles of 32 columns; when they are too few to fill the device, `len` is cut into
        // segments of at least 256 rows, and a second launch combines each output's.
        let tiles = outer * inner.div_ceil(32);
        let nchunks = blocks_to_fill.div_ceil(tiles).min(len.div_ceil(256)).max(1);
        let chunk = len.div_ceil(nchunks);
        let nchunks = len.div_ceil(chunk);
        let grid = dev.grid(tiles * nchunks * BLOCK as u64, BLOCK);
        if nchunks == 1 {
            let args = KernelArgs::new().ptr(xb).u64(outer).u64(len).u64(inner).u64(chunk).u64(1);
            // `argmax_tile_{T}(const T* x, u64 outer, u64 len, u64 inner, u64 chunk, u64 nchunks, T* vals, int* idx)`:
            // SAFETY: each block reads a tile of columns (below `inner`) of rows below `len` of one of the `outer`
            // slices, and writes output `o * inner + c` of `idx` (and of `vals` unless null), `outer * inner` of each.
            unsafe { dev.launch(k("tile")?, (grid, 1, 1), (BLOCK, 1, 1), &s, args.ptr_or_null(v).ptr(&idx))? };
            return finish(idx, vals);
        }
        let parts = (outer * inner * nchunks) as usize;
        let pv = CudaBuffer::alloc(dev, &s, parts * dtype.size())?;
        let pi = CudaBuffer::alloc(dev, &s, parts * 4)?;
        let args = KernelArgs::new().ptr(xb).u64(outer).u64(len).u64(inner).u64(chunk).u64(nchunks);
        // `argmax_tile_{T}(...)` as above, with `nchunks` segments of `chunk` rows:
        // SAFETY: as above; candidate `(o * inner + c) * nchunks + seg` goes to `pv` and `pi`, which hold `outer *
        // inner * nchunks` each, allocated on `s` and freed there after the launch below.
        unsafe { dev.launch(k("tile")?, (grid, 1, 1), (BLOCK, 1, 1), &s, args.ptr(&pv).ptr(&pi))? };
        let outputs = outer * inner;
        let args = KernelArgs::new().ptr(&pv).ptr(&pi).u64(outputs).u64(nchunks).ptr_or_null(v).ptr(&idx);
        // `argmax_final_{T}(const T* pv, const int* pi, u64 outer, u64 nchunks, T* vals, int* idx)`, one "row" per
        // output:
        // SAFETY: one warp per output reads its `nchunks` candidates written just before on `s` and writes that
        // output of `idx` (and of `vals` unless null), `outer * inner` of each.
        unsafe { dev.launch(k("final")?, (dev.grid(outputs * 32, BLOCK), 1, 1), (BLOCK, 1, 1), &s, args)? };
        return finish(idx, vals);
    }
    if len > WARP_ROW && outer < blocks_to_fill && len >= 2 * SEGMENT {
        // Few long rows: segments of at least SEGMENT elements (a multiple of 64, so
        // that segments of an aligned row stay aligned), about `blocks_to_fill` in all.
        let want = blocks_to_fill.div_ceil(outer);
        let chunk = len.div_ceil(want).max(SEGMENT).next_multiple_of(64);
        let nchunks = len.div_ceil(chunk);
        let parts = (outer * nchunks) as usize;
        let pv = CudaBuffer::alloc(dev, &s, parts * dtype.size())?;
        let pi = CudaBuffer::alloc(dev, &s, parts * 4)?;
        let args = KernelArgs::new().ptr(xb).u64(outer).u64(len).u64(chunk).u64(nchunks).ptr(&pv).ptr(&pi);
        let grid = dev.grid(outer * nchunks * BLOCK as u64, BLOCK);
        // `argmax_block_{T}(const T* x, u64 outer, u64 len, u64 chunk, u64 nchunks, T* vals, int* idx)`:
        // SAFETY: segment `c` of row `o` reads elements `c * chunk ..` (at most `chunk`, within the row of `len`) and
        // writes candidate `o * nchunks + c` of `pv` and `pi`, which hold `outer * nchunks` each, allocated on `s`
        // and freed there after the launch below.
        unsafe { dev.launch(k("block")?, (grid, 1, 1), (BLOCK, 1, 1), &s, args)? };
        let args = KernelArgs::new().ptr(&pv).ptr(&pi).u64(outer).u64(nchunks).ptr_or_null(v).ptr(&idx);
        // `argmax_final_{T}(const T* pv, const int* pi, u64 outer, u64 nchunks, T* vals, int* idx)`:
        // SAFETY: one warp per row reads that row's `nchunks` candidates written just before on `s` and writes output
        // `row` of `idx` (and of `vals` unless null), `outer` of each.
        unsafe { dev.launch(k("final")?, (dev.grid(outer * 32, BLOCK), 1, 1), (BLOCK, 1, 1), &s, args)? };
    } else if len > WARP_ROW {
        let args = KernelArgs::new().ptr(xb).u64(outer).u64(len).u64(len).u64(1).ptr_or_null(v).ptr(&idx);
        // `argmax_block_{T}(const T* x, u64 outer, u64 len, u64 chunk, u64 nchunks, T* vals, int* idx)` with one chunk
        // of the whole row:
        // SAFETY: block-strided rows, each of `len` elements of `x`, one result each into `idx` (and `vals` unless
        // null), `outer` of each.
        unsafe { dev.launch(k("block")?, (dev.grid(outer * BLOCK as u64, BLOCK), 1, 1), (BLOCK, 1, 1), &s, args)? };
    } else {
        let args = KernelArgs::new().ptr(xb).u64(outer).u64(len).ptr_or_null(v).ptr(&idx);
        // `argmax_warp_{T}(const T* x, u64 outer, u64 len, T* vals, int* idx)`:
        // SAFETY: warp-strided rows, each of `len` elements of `x`, one result each into `idx` (and `vals` unless
        // null), `outer` of each.
        unsafe { dev.launch(k("warp")?, (dev.grid(outer * 32, BLOCK), 1, 1), (BLOCK, 1, 1), &s, args)? };
    }
    finish(idx, vals)
}
