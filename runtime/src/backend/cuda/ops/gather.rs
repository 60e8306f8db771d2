//! `index_select`, kernels of gather.cu: a copy of the rows a list of indices picks,
//! which checks every index on the device (`flag`) and fails the op on the first one out
//! of range. The kernels move units of 1 to 16 bytes, the widest that divides a row and
//! both buffers' alignment, so one set serves every element type; long rows (the
//! embedding lookup: dim 0 of a `[vocab, hidden]` table) go a block per row. And its
//! gradient, `index_add`: one launch that sums, in the order of the list, the rows of the
//! gradient each index picked.

use locus_kernels::Source;

use crate::backend::cuda::driver::buffer::CudaBuffer;
use crate::backend::cuda::driver::flag::first_bad_index;
use crate::backend::cuda::driver::launch::KernelArgs;
use crate::backend::cuda::driver::memory::{alloc, done};
use crate::backend::sync::capture::{IndexRule, Indexed};
use crate::backend::Gather;
use crate::element::DType;
use crate::error::Result;

/// Rows of at least this many units are copied a block per row, else a thread per unit.
const LONG_ROW: u64 = 32;

/// The unit a row of `row_bytes` bytes moves in, given both buffers' addresses: its size
/// and the row and flat kernels of that size.
fn unit(row_bytes: u64, src: u64, dst: u64) -> (u64, &'static str, &'static str) {
    const UNITS: [(u64, &str, &str); 5] = [
        (16, "index_select_rows_w16", "index_select_flat_w16"),
        (8, "index_select_rows_w8", "index_select_flat_w8"),
        (4, "index_select_rows_w4", "index_select_flat_w4"),
        (2, "index_select_rows_w2", "index_select_flat_w2"),
        (1, "index_select_rows_w1", "index_select_flat_w1"),
    ];
    let fits = |w: u64| row_bytes % w == 0 && src % w == 0 && dst % w == 0;
    UNITS.into_iter().find(|u| fits(u.0)).unwrap_or(UNITS[4])
}

/// The elements `index` (`g.count` i32) picks along the middle dim of `g`, from `x`.
pub(in crate::backend::cuda) fn index_select(
    x: &CudaBuffer,
    index: &CudaBuffer,
    dtype: DType,
    g: Gather,
) -> Result<CudaBuffer> {
    let dev = x.device();
    let len = g.out_len();
    let (s, out) = alloc(dev, dtype, len, &[x, index])?;
    if g.count == 0 {
        // No index to check, nothing to copy.
        return done(out);
    }
    let (outer, size, count) = (g.outer as u64, g.size as u64, g.count as u64);
    // Every launch below reads `index` (`count` i32), ready and kept alive on `s` with
    // `x` and `out` (see `alloc`), and reports into `err`, `first_bad_index`'s 8-byte
    // word on `s`.
    let rule = IndexRule { addr: index.ptr(), count: g.count, of: Indexed::Rows(g) };
    let bad = first_bad_index(dev, &s, (index, rule), |err| {
        if len == 0 {
            let f = dev.function(Source::Gather, "index_check")?;
            let args = KernelArgs::new().ptr(index).u64(count).u64(size).ptr(err);
            // SAFETY: `index_check(const i32* index, u64 count, u64 size, u64* err)`
            // reads the `count` indices only.
            return unsafe { dev.launch(f, (dev.grid(count, 256), 1, 1), (256, 1, 1), &s, args) };
        }
        let row_bytes = (g.inner * dtype.size()) as u64;
        let (w, rows_kernel, flat_kernel) = unit(row_bytes, x.ptr(), out.ptr());
        let units = row_bytes / w;
        let args = KernelArgs::new().ptr(x).ptr(index).ptr(&out).u64(outer).u64(size).u64(count).u64(units).ptr(err);
        // `index_select_{rows,flat}_w{w}(const W* x, const i32* index, W* out, u64 outer, u64 size, u64 count, u64
        // inner, u64* err)`, W a `w`-byte unit, which divides a row and both addresses (`unit`): `x` holds
        // `outer * size` rows of `units` units (`g`'s shape of the input, the caller's contract) and `out` `outer *
        // count` rows (`len` elements); a row is read only for an index `0 <= t < size`.
        if units >= LONG_ROW {
            let threads = (units.div_ceil(32) * 32).min(256) as u32;
            let blocks = dev.grid((outer * count).saturating_mul(threads as u64), threads);
            let f = dev.function(Source::Gather, rows_kernel)?;
            // SAFETY: as said above; a block per output row, whole warps.
            unsafe { dev.launch(f, (blocks, 1, 1), (threads, 1, 1), &s, args) }
        } else {
            let f = dev.function(Source::Gather, flat_kernel)?;
            let work = (outer * count).saturating_mul(units);
            // SAFETY: as said above; a thread per unit in a grid-stride loop.
            unsafe { dev.launch(f, (dev.grid(work, 256), 1, 1), (256, 1, 1), &s, args) }
        }
    })?;
    if let Some((at, v)) = bad {
        return Err(g.out_of_range(at, v.into()));
    }
    done(out)
}

/// The gradient of [`index_select`] (float types): `grad` (`g.out_len()` elements, the
/// gradient of its result) added into the rows `index` picked, `[outer, size, inner]`,
/// rows no index picks 0. One launch, no memory addressed by an index's value (an index
/// out of range picks no row), the sums in the order of the index list.
pub(in crate::backend::cuda) fn index_add(
    grad: &CudaBuffer,
    index: &CudaBuffer,
    dtype: DType,
    g: Gather,
) -> Result<CudaBuffer> {
    let dev = grad.device();
    let len = g.outer * g.size * g.inner;
    let (s, out) = alloc(dev, dtype, len, &[grad, index])?;
    if len == 0 {
        return done(out);
    }
    let (outer, size, count, inner) = (g.outer as u64, g.size as u64, g.count as u64, g.inner as u64);
    let f = dev.kernel(Source::Gather, "index_add", "", dtype)?;
    let warps = (outer * size).saturating_mul(inner.div_ceil(32));
    let args = KernelArgs::new().ptr(grad).ptr(index).ptr(&out).u64(outer).u64(size).u64(count).u64(inner);
    // `index_add_{dtype}(const T* g, const i32* index, T* out, u64 outer, u64 size, u64 count, u64 inner)` reads the
    // `count` indices and, for each that is in `[0, size)`, a row of `inner` elements of `grad` (`outer * count *
    // inner`, `g`'s shape of the gradient, the caller's contract), and writes `out`'s `len` elements; all ready and
    // kept alive on `s` (see `alloc`).
    // SAFETY: as said above; blocks of whole warps (256 threads), which the ballot needs.
    unsafe { dev.launch(f, (dev.grid(warps.saturating_mul(32), 256), 1, 1), (256, 1, 1), &s, args)? };
    done(out)
}

#[cfg(test)]
mod tests {
    use crate::backend::cuda::ops::gather::*;

    #[test]
    fn rows_move_in_the_widest_unit_both_buffers_allow() {
        assert_eq!(unit(16384, 0x1000, 0x2000).0, 16, "an embedding row of 4096 f32");
        assert_eq!(unit(12, 0x1000, 0x2000).0, 4, "three f32");
        assert_eq!(unit(16, 0x1008, 0x2000).0, 8, "a source on 8 bytes");
        assert_eq!(unit(6, 0x1000, 0x2000).0, 2, "three 16-bit elements");
        assert_eq!(unit(3, 0x1000, 0x2000), (1, "index_select_rows_w1", "index_select_flat_w1"));
    }
}
