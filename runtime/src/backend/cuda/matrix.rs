//! The ops that move elements between positions: matmul (cuBLAS for floats, a kernel of
//! matrix.cu for integers), transpose, concatenation, slices and strided block copies
//! (narrow, select, cat and stack along any dim). Contiguous runs are plain
//! device-to-device copies; only strided ones launch a kernel.

use cudarc::cublas::sys::cublasOperation_t;
use cudarc::driver::result;
use locus_kernels::Source;

use super::buffer::CudaBuffer;
use super::device::{driver, DeviceState};
use super::launch::KernelArgs;
use super::memory::{alloc, done};
use super::stream::blas_err;
use super::CudaBackend;
use crate::backend::{Blocks, Gemm};
use crate::element::DType;
use crate::error::{Error, Result};

/// `[m, k] x [k, n]`, row-major.
pub(super) fn matmul(a: &CudaBuffer, b: &CudaBuffer, dtype: DType, g: Gemm) -> Result<CudaBuffer> {
    let Gemm { m, k, n } = g;
    let dev = a.device();
    let (stream, out) = alloc(dev, dtype, m * n, &[a, b])?;
    if m == 0 || n == 0 {
        return done(out);
    }
    let (ab, bb, s) = (a, b, stream.raw.0);
    if k == 0 {
        // SAFETY: `out` holds exactly `m * n` elements of `dtype`, allocated on `s`
        // (`stream`, live for the call) and freed there after this memset.
        unsafe { result::memset_d8_async(out.ptr(), 0, m * n * dtype.size(), s) }
            .map_err(driver(dev.ordinal, "cuMemsetD8Async"))?;
        return done(out);
    }
    let too_big = |what: usize| what > i32::MAX as usize;
    if dtype.is_float() {
        if too_big(m) || too_big(n) || too_big(k) {
            return Err(Error::InvalidArgument {
                op: "matmul",
                reason: "dims beyond i32::MAX do not fit cuBLAS".into(),
            });
        }
        // The output may come from the stream's block cache, with no driver call that
        // would have made this device's context current: cuBLAS needs it current.
        dev.bind()?;
        // The stream's own handle, bound to it once: no other thread can move it to
        // another stream between binding and the gemm.
        let h = stream.blas()?;
        let (mi, ni, ki) = (m as i32, n as i32, k as i32);
        let (ap, bp, o) = (ab.ptr(), bb.ptr(), out.ptr());
        // Row-major C = A B is column-major C^T = B^T A^T: swap operands, no transposes.
        let nn = cublasOperation_t::CUBLAS_OP_N;
        // `ap`, `bp` and `o` hold m*k, k*n and m*n elements of `dtype` on this device (allocated by this backend
        // for these shapes), ready and kept alive on `stream` (see `alloc`);
        // SAFETY: `h` is `stream`'s own cuBLAS handle, bound to it, and this device's context is current. The
        // leading dimensions (n, k, n) are those of the row-major operands read as column-major, and all dims fit
        // an `i32` (checked above). `alpha`/`beta` point at temporaries that outlive the call.
        unsafe {
            // The same call for both widths; only the element type differs.
            macro_rules! gemm {
                ($f:ident, $t:ty, $name:literal) => {
                    cudarc::cublas::result::$f(
                        h,
                        nn,
                        nn,
                        ni,
                        mi,
                        ki,
                        &(1.0 as $t),
                        bp as *const $t,
                        ni,
                        ap as *const $t,
                        ki,
                        &(0.0 as $t),
                        o as *mut $t,
                        ni,
                    )
                    .map_err(|e| blas_err(dev.ordinal, $name, e))?
                };
            }
            if dtype == DType::F32 {
                gemm!(sgemm, f32, "cublasSgemm");
            } else {
                gemm!(dgemm, f64, "cublasDgemm");
            }
        }
    } else {
        let (gx, gy) = (n.div_ceil(16), m.div_ceil(16));
        if gx > i32::MAX as usize || gy > 65535 {
            return Err(Error::InvalidArgument {
                op: "matmul",
                reason: format!("[{m}, {k}] x [{k}, {n}] is too large for the integer kernel"),
            });
        }
        let f = dev.kernel(Source::Matrix, "matmul", "", dtype)?;
        let args = KernelArgs::new().ptr(ab).ptr(bb).ptr(&out).u64(m as u64).u64(k as u64).u64(n as u64);
        // SAFETY: `matmul_{dtype}(const T* a, const T* b, T* out, u64 m, u64 k, u64 n)`:
        // `a`, `b` and `out` hold m*k, k*n and m*n elements of `dtype`, ready and kept
        // alive on `stream` (see `alloc`); the kernel bounds its indices by m, k and n.
        unsafe { dev.launch(f, (gx as u32, gy as u32, 1), (16, 16, 1), &stream, args)? };
    }
    done(out)
}

/// The `[cols, rows]` transpose of the row-major `[rows, cols]` matrix `x`.
pub(super) fn transpose(x: &CudaBuffer, dtype: DType, rows: usize, cols: usize) -> Result<CudaBuffer> {
    let dev = x.device();
    let (s, out) = alloc(dev, dtype, rows * cols, &[x])?;
    if rows == 0 || cols == 0 {
        return done(out);
    }
    let (gx, gy) = (cols.div_ceil(32), rows.div_ceil(32));
    if gx > i32::MAX as usize || gy > 65535 {
        return Err(Error::InvalidArgument { op: "transpose", reason: format!("[{rows}, {cols}] is too large") });
    }
    let args = KernelArgs::new().ptr(x).ptr(&out).u64(rows as u64).u64(cols as u64);
    let f = dev.kernel(Source::Matrix, "transpose", "", dtype)?;
    // SAFETY: `transpose_{dtype}(const T* x, T* out, u64 rows, u64 cols)`: `x` and `out`
    // each hold `rows * cols` elements of `dtype`, ready and kept alive on `s` (see
    // `alloc`); the kernel bounds its indices by `rows` and `cols`.
    unsafe { dev.launch(f, (gx as u32, gy as u32, 1), (32, 8, 1), &s, args)? };
    done(out)
}

/// The parts' elements one after another (each part is `(buffer, its length)`), on
/// `dev`.
pub(super) fn concat(dev: &'static DeviceState, dtype: DType, parts: &[(&CudaBuffer, usize)]) -> Result<CudaBuffer> {
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
pub(super) fn slice(x: &CudaBuffer, dtype: DType, offset: usize, len: usize) -> Result<CudaBuffer> {
    let (s, out) = alloc(x.device(), dtype, len, &[x])?;
    let src = x.ptr() + (offset * dtype.size()) as u64;
    // SAFETY: the caller checked `offset + len` against `x`'s length (Backend
    // contract), so the source range lies within `x`; `out` holds `len` elements; both
    // are ready and kept alive on `s` (see `alloc`), in distinct allocations.
    unsafe { CudaBackend::dtod(&s, out.ptr(), src, len * dtype.size())? };
    done(out)
}

/// A new buffer of `len` elements on `dev`, each part's runs of elements copied into it.
pub(super) fn copy_blocks(
    dev: &'static DeviceState,
    dtype: DType,
    len: usize,
    parts: &[Blocks<'_, CudaBuffer>],
) -> Result<CudaBuffer> {
    let inputs: Vec<&CudaBuffer> = parts.iter().map(|p| p.src).collect();
    let (s, out) = alloc(dev, dtype, len, &inputs)?;
    let size = dtype.size() as u64;
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
