//! Softmax, log-softmax and cross-entropy's loss per row, kernels of softmax.cu (whose
//! LayerNorm kernels `layer_norm` launches).
//!
//! Over the last dim (the common case, and the benchmark's) each row goes to a group of
//! threads that keeps it in registers: a warp for rows of up to 1024 elements, else a
//! block sized so the row fits (16-byte vector loads when the rows and both buffers are
//! aligned). Rows too long for a block's registers are read twice; softmax over an
//! inner dim gives each output column to a thread.

use locus_kernels::Source;

use crate::backend::cuda::driver::buffer::CudaBuffer;
use crate::backend::cuda::driver::device::DeviceState;
use crate::backend::cuda::driver::flag::first_bad_index;
use crate::backend::cuda::driver::launch::KernelArgs;
use crate::backend::cuda::driver::memory::{alloc, done};
use crate::backend::sync::capture::{IndexRule, Indexed};
use crate::backend::{bad_target, float_only, SoftmaxOp};
use crate::element::DType;
use crate::error::Result;
use crate::shape::Reduction;

/// Rows per block of the warp kernels (blocks of `(32, WARP_ROWS)` threads).
const WARP_ROWS: u32 = 4;

/// Elements a thread of the block kernels holds of its row: `VEC_REGS` and `ONE_REGS` of
/// softmax.cu (which fit the kernels in the 64 registers blocks of 1024 threads allow).
fn per_thread(dtype: DType, vectors: bool) -> u64 {
    match (dtype == DType::F64, vectors) {
        (true, _) => 12,
        (false, true) => 32,
        (false, false) => 24,
    }
}

/// How a softmax over the last dim runs: the kernel variant, grid and block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Plan {
    variant: &'static str,
    grid: u32,
    block: (u32, u32, u32),
}

/// The plan for `rows` rows of `len` (> 0) elements of `dtype`; `aligned` when both
/// buffers start on 16 bytes. `blocks_for(n, threads)` caps a grid of `n` blocks.
fn plan(dtype: DType, rows: u64, len: u64, aligned: bool, blocks_for: impl Fn(u64, u32) -> u32) -> Plan {
    let warps = |variant| Plan {
        variant,
        grid: blocks_for(rows.div_ceil(WARP_ROWS as u64), 32 * WARP_ROWS),
        block: (32, WARP_ROWS, 1),
    };
    if len <= 4 * 32 {
        return warps("warp4");
    }
    if len <= 32 * 32 {
        return warps("warp32");
    }
    let vectors = aligned && len % (16 / dtype.size() as u64) == 0;
    // The fewest whole warps whose registers hold the row.
    let threads = len.div_ceil(per_thread(dtype, vectors)).div_ceil(32) * 32;
    if threads > 1024 {
        return Plan { variant: "loop", grid: blocks_for(rows, 1024), block: (1024, 1, 1) };
    }
    let threads = threads.max(64) as u32;
    Plan { variant: if vectors { "vec" } else { "block" }, grid: blocks_for(rows, threads), block: (threads, 1, 1) }
}

impl DeviceState {
    /// A grid of `blocks` blocks of `threads` threads, at most what keeps the device full
    /// several times over (the kernels loop over the rest).
    fn row_grid(&self, blocks: u64, threads: u32) -> u32 {
        let fill = self.sm_count.max(1) as u64 * (2048 / threads as u64).max(1) * 4;
        blocks.clamp(1, fill) as u32
    }
}

/// `op` of `x` over the dim `r` describes; with `grad`, `x` is the op's output and the
/// result its input's gradient ([`softmax_back`]).
pub(in crate::backend::cuda) fn softmax(
    x: &CudaBuffer,
    grad: Option<&CudaBuffer>,
    op: SoftmaxOp,
    dtype: DType,
    r: Reduction,
) -> Result<CudaBuffer> {
    float_only(op.name(), dtype)?;
    if let Some(g) = grad {
        return softmax_back(x, g, op, dtype, r);
    }
    let dev = x.device();
    let (s, out) = alloc(dev, dtype, r.outer * r.len * r.inner, &[x])?;
    if r.outer * r.len * r.inner == 0 {
        return done(out);
    }
    let (outer, len, inner) = (r.outer as u64, r.len as u64, r.inner as u64);
    // In both launches `x` and `out` hold `outer * len * inner` elements of `dtype`, ready
    // and kept alive on `s` (see `alloc`); the kernels bound every access by the counts.
    if inner > 1 {
        let f = dev.kernel(Source::Softmax, op.name(), "cols", dtype)?;
        let args = KernelArgs::new().ptr(x).ptr(&out).u64(outer).u64(len).u64(inner);
        // SAFETY: `{op}_cols_{dtype}(const T* x, T* out, u64 outer, u64 len, u64 inner)`,
        // `x` and `out` as `[outer, len, inner]` (above).
        unsafe { dev.launch(f, (dev.grid(outer * inner, 256), 1, 1), (256, 1, 1), &s, args)? };
        return done(out);
    }
    let aligned = x.ptr() % 16 == 0 && out.ptr() % 16 == 0;
    let p = plan(dtype, outer, len, aligned, |n, t| dev.row_grid(n, t));
    let f = dev.kernel(Source::Softmax, op.name(), p.variant, dtype)?;
    let args = KernelArgs::new().ptr(x).ptr(&out).u64(outer).u64(len);
    // `{op}_{variant}_{dtype}(const T* x, T* out, u64 rows, u64 len)`, `x` and
    // `out` as `outer` rows of `len` (above). `plan` keeps each kernel's contract: rows of
    // at most 128 (warp4) or 1024 (warp32) elements for a warp; for a block, at most
    // `per_thread` elements per thread (the kernel's own count), in whole warps, at most
    // 1024 threads (the kernels' launch bound); vectors only for 16-byte aligned buffers
    // and rows of whole vectors.
    // SAFETY: for the reasons in the comment just above.
    unsafe { dev.launch(f, (p.grid, 1, 1), p.block, &s, args)? };
    done(out)
}

/// The gradient of `op` over the last dim from its output `y` and the output's gradient
/// `g`: a warp per row up to 1024 elements, else a block of whole warps.
fn softmax_back(y: &CudaBuffer, g: &CudaBuffer, op: SoftmaxOp, dtype: DType, r: Reduction) -> Result<CudaBuffer> {
    op.check_back(r)?;
    let dev = y.device();
    let (s, out) = alloc(dev, dtype, r.outer * r.len, &[y, g])?;
    if r.outer * r.len == 0 {
        return done(out);
    }
    let (n, l) = (r.outer as u64, r.len as u64);
    let (variant, grid, block) = row_groups(dev, n, l);
    let f =
        dev.kernel(Source::Softmax, op.name(), if variant == "warp" { "back_warp" } else { "back_block" }, dtype)?;
    let args = KernelArgs::new().ptr(y).ptr(g).ptr(&out).u64(n).u64(l);
    // `{op}_back_{warp,block}_{dtype}(const T* y, const T* g, T* dx, u64 rows, u64 len)`:
    // `y`, `g` and `out` hold `rows * len` elements of `dtype` (the caller's contract and
    // `alloc`), ready and kept alive on `s`; the warp kernels get blocks of `(32,
    // WARP_ROWS)`, the block kernels whole warps, at most 1024 threads (their launch
    // bounds), and every access is bounded by the counts.
    // SAFETY: for the reasons in the comment just above.
    unsafe { dev.launch(f, (grid, 1, 1), block, &s, args)? };
    done(out)
}

/// The groups a row kernel over `rows` rows of `len` takes: a warp per row up to 1024
/// elements (blocks of `(32, WARP_ROWS)`), else a block of whole warps, about eight
/// elements per thread.
pub(super) fn row_groups(dev: &DeviceState, rows: u64, len: u64) -> (&'static str, u32, (u32, u32, u32)) {
    if len <= 1024 {
        ("warp", dev.row_grid(rows.div_ceil(WARP_ROWS as u64), 32 * WARP_ROWS), (32, WARP_ROWS, 1))
    } else {
        let threads = len.div_ceil(8).div_ceil(32).clamp(2, 32) as u32 * 32;
        ("block", dev.row_grid(rows, threads), (threads, 1, 1))
    }
}

/// Cross-entropy's loss of each of the `rows` rows of `[rows, classes]` logits `x`, with
/// `targets` (`rows` i32), after checking every target on the device.
pub(in crate::backend::cuda) fn cross_entropy_rows(
    x: &CudaBuffer,
    targets: &CudaBuffer,
    dtype: DType,
    rows: usize,
    classes: usize,
) -> Result<CudaBuffer> {
    float_only("cross_entropy", dtype)?;
    let dev = x.device();
    let (s, out) = alloc(dev, dtype, rows, &[x, targets])?;
    if rows == 0 {
        return done(out);
    }
    let (n, c) = (rows as u64, classes as u64);
    let (variant, grid, block) = if c <= 1024 {
        ("warp", dev.row_grid(n.div_ceil(WARP_ROWS as u64), 32 * WARP_ROWS), (32, WARP_ROWS, 1))
    } else {
        // About sixteen classes per thread, in whole warps.
        let threads = c.div_ceil(16).div_ceil(32).clamp(4, 32) as u32 * 32;
        ("block", dev.row_grid(n, threads), (threads, 1, 1))
    };
    let f = dev.kernel(Source::Softmax, "nll", variant, dtype)?;
    let rule = IndexRule { addr: targets.ptr(), count: rows, of: Indexed::Classes(classes) };
    let bad = first_bad_index(dev, &s, (targets, rule), |err| {
        let args = KernelArgs::new().ptr(x).ptr(targets).ptr(&out).u64(n).u64(c).ptr(err);
        // `nll_{warp,block}_{dtype}(const T* x, const i32* target, T* loss, u64
        // rows, u64 c, u64* err)`: `x` holds `rows * classes` elements of `dtype`,
        // `targets` `rows` i32 and `out` `rows` elements (the caller's contract and
        // `alloc`), all ready and kept alive on `s`; `err` is `first_bad_index`'s 8-byte
        // word on `s`. The kernel reads `x[row * c + t]` only for a target `0 <= t < c`;
        // the warp kernel gets blocks of `(32, WARP_ROWS)`, the block kernel whole warps,
        // at most 1024 threads.
        // SAFETY: for the reasons in the comment just above.
        unsafe { dev.launch(f, (grid, 1, 1), block, &s, args) }
    })?;
    if let Some((row, t)) = bad {
        return Err(bad_target(row, t.into(), classes));
    }
    done(out)
}

/// Cross-entropy's gradient with respect to `[rows, classes]` logits `x`, given each row's
/// loss's gradient `grad` (`rows` elements) and the `targets` the forward checked.
pub(in crate::backend::cuda) fn cross_entropy_back(
    x: &CudaBuffer,
    targets: &CudaBuffer,
    grad: &CudaBuffer,
    dtype: DType,
    (rows, classes): (usize, usize),
) -> Result<CudaBuffer> {
    float_only("cross_entropy", dtype)?;
    let dev = x.device();
    let (s, out) = alloc(dev, dtype, rows * classes, &[x, targets, grad])?;
    if rows * classes == 0 {
        return done(out);
    }
    let (n, c) = (rows as u64, classes as u64);
    let (groups, grid, block) = row_groups(dev, n, c);
    let f = dev.kernel(Source::Softmax, "nll", if groups == "warp" { "back_warp" } else { "back_block" }, dtype)?;
    let args = KernelArgs::new().ptr(x).ptr(targets).ptr(grad).ptr(&out).u64(n).u64(c);
    // `nll_back_{warp,block}_{dtype}(const T* x, const i32* target, const T* g, T* dx, u64 rows, u64 c)`: `x` and
    // `out` hold `rows * classes` elements of `dtype`, `targets` `rows` i32 and `grad` `rows` elements (the caller's
    // contract and `alloc`), all ready and kept alive on `s`; a target is compared with class indices, never used
    // as one; the warp kernel gets blocks of `(32, WARP_ROWS)`, the block kernel whole warps, at most 1024 threads.
    // SAFETY: for the reasons in the comment just above.
    unsafe { dev.launch(f, (grid, 1, 1), block, &s, args)? };
    done(out)
}

#[cfg(test)]
mod tests {
    use crate::backend::cuda::ops::softmax::*;

    fn plan_of(dtype: DType, len: u64, aligned: bool) -> Plan {
        plan(dtype, 8192, len, aligned, |n, _| n.min(1 << 20) as u32)
    }

    #[test]
    fn rows_go_to_warps_then_blocks_that_hold_them_then_the_loop() {
        assert_eq!(plan_of(DType::F32, 3, true).variant, "warp4");
        assert_eq!(plan_of(DType::F32, 3, true).grid, 2048);
        assert_eq!(plan_of(DType::F32, 128, true).variant, "warp4");
        assert_eq!(plan_of(DType::F32, 129, true).variant, "warp32");
        assert_eq!(plan_of(DType::F64, 1024, true).variant, "warp32");
        // The benchmark's rows: 8192 f32, 32 per thread in 8 vectors, 256 threads.
        let p = plan_of(DType::F32, 8192, true);
        assert_eq!((p.variant, p.block, p.grid), ("vec", (256, 1, 1), 8192));
        // Not aligned, or not whole vectors: single loads, 24 per thread.
        assert_eq!(plan_of(DType::F32, 8192, false).block, (352, 1, 1));
        assert_eq!(plan_of(DType::F32, 8191, true).variant, "block");
        assert_eq!(plan_of(DType::F64, 8192, true).block, (704, 1, 1));
        // A short row above the warps still gets two warps.
        assert_eq!(plan_of(DType::F32, 1025, true).block, (64, 1, 1));
        // The largest rows the registers hold, and one more.
        assert_eq!(plan_of(DType::F32, 32 * 1024, true).block, (1024, 1, 1));
        assert_eq!(plan_of(DType::F32, 32 * 1024 + 4, true).variant, "loop");
        assert_eq!(plan_of(DType::F32, 24 * 1024 + 1, false).variant, "loop");
        for (dtype, len, aligned) in [(DType::F32, 10_000, true), (DType::F64, 3001, false), (DType::F32, 40_000, true)]
        {
            let p = plan_of(dtype, len, aligned);
            let threads = p.block.0 as u64 * p.block.1 as u64;
            assert!(threads % 32 == 0 && threads <= 1024, "{p:?}");
            if p.variant == "vec" || p.variant == "block" {
                assert!(threads * per_thread(dtype, p.variant == "vec") >= len, "{p:?} holds a row of {len}");
            }
        }
    }
}
