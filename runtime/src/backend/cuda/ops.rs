//! The cuda backend's compute ops: fills, elementwise and broadcast kernels, reductions,
//! cuBLAS matmul, transpose, concatenation and slices. Each allocates its output on the
//! thread's current stream ([`CudaBackend::alloc`]), makes its inputs ready there, and
//! queues its kernels on that stream.

use std::ffi::c_void;

use cudarc::cublas::sys::cublasOperation_t;
use cudarc::driver::result;
use locus_kernels::Source;

use super::device::driver;
use super::{cuda, CudaBackend, CudaBuffer, UNROLL};
use crate::backend::{float_only, BinaryOp, Buffer, ReduceOp, UnaryOp};
use crate::device::DeviceId;
use crate::element::{DType, Scalar};
use crate::error::{Error, Result};
use crate::shape::{Layout, Reduction};

/// Up to 8 dims of a broadcast, with per-operand strides; matches `Bcast` in
/// elementwise.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct Bcast {
    rank: i32,
    shape: [u64; 8],
    lhs: [u64; 8],
    rhs: [u64; 8],
}

/// Merges neighbouring dims that both operands walk contiguously, then packs them.
fn bcast(op: &'static str, shape: &[usize], lhs: &[usize], rhs: &[usize]) -> Result<Bcast> {
    let mut dims: Vec<(u64, u64, u64)> = Vec::new();
    for i in 0..shape.len() {
        let (n, l, r) = (shape[i] as u64, lhs[i] as u64, rhs[i] as u64);
        if n == 1 {
            continue;
        }
        match dims.last_mut() {
            Some(last) if last.1 == l * n && last.2 == r * n => *last = (last.0 * n, l, r),
            _ => dims.push((n, l, r)),
        }
    }
    if dims.len() > 8 {
        return Err(Error::InvalidArgument {
            op,
            reason: format!("broadcasting over {} non-mergeable dims; the cuda backend takes at most 8", dims.len()),
        });
    }
    let mut b = Bcast { rank: dims.len() as i32, shape: [1; 8], lhs: [0; 8], rhs: [0; 8] };
    for (i, (n, l, r)) in dims.into_iter().enumerate() {
        (b.shape[i], b.lhs[i], b.rhs[i]) = (n, l, r);
    }
    Ok(b)
}

fn blas_err(device: DeviceId, call: &str, e: impl std::fmt::Debug) -> Error {
    Error::Kernel { device, name: call.into(), message: format!("{e:?}") }
}

impl CudaBackend {
    pub(super) fn fill_op(&self, device: DeviceId, dtype: DType, len: usize, value: Scalar) -> Result<Buffer> {
        let n = len as u64;
        // SAFETY: `fill_{dtype}(T* out, u64 n, T v)` gets the output address, `n` = `len`
        // (the output's element count) and `v`, whose Rust type is `dtype`'s: the tensor
        // layer passes `T::DTYPE` with `value.to_scalar()` of the same `T`.
        with_scalar!(value, v => unsafe { self.produce(device, dtype, len, (Source::Init, "fill", n), &[], |out| {
            args![*out, n, v].to_vec()
        }) })
    }

    pub(super) fn arange_op(
        &self,
        device: DeviceId,
        dtype: DType,
        len: usize,
        start: f64,
        step: f64,
    ) -> Result<Buffer> {
        let n = len as u64;
        // SAFETY: `arange_{dtype}(T* out, u64 n, f64 start, f64 step)` gets the output
        // address, `n` = `len` (the output's element count) and two `f64`s.
        unsafe {
            self.produce(device, dtype, len, (Source::Init, "arange", n), &[], |out| {
                args![*out, n, start, step].to_vec()
            })
        }
    }

    pub(super) fn rand_op(&self, device: DeviceId, dtype: DType, len: usize, seed: u64) -> Result<Buffer> {
        float_only("rand", dtype)?;
        let n = len as u64;
        // SAFETY: `rand_{f32,f64}(T* out, u64 n, u64 seed)` (float `dtype` checked above)
        // gets the output address, `n` = `len` (the output's element count) and a `u64`.
        unsafe { self.produce(device, dtype, len, (Source::Init, "rand", n), &[], |out| args![*out, n, seed].to_vec()) }
    }

    pub(super) fn unary_op(
        &self,
        device: DeviceId,
        op: UnaryOp,
        dtype: DType,
        x: &Buffer,
        len: usize,
    ) -> Result<Buffer> {
        let opname = op.name();
        if matches!(op, UnaryOp::Exp | UnaryOp::Sqrt) {
            float_only(opname, dtype)?;
        }
        let (xp, n) = (cuda(x)?.ptr(), len as u64);
        let work = n.div_ceil(16 / dtype.size() as u64).div_ceil(UNROLL);
        // SAFETY: `{op}_{dtype}(const T* x, T* out, u64 n)` gets `x` (an input, `len`
        // elements of `dtype` by the Backend contract), the output (`len` elements) and
        // `n` = `len`.
        unsafe {
            self.produce(device, dtype, len, (Source::Elementwise, opname, work), &[x], |out| {
                args![xp, *out, n].to_vec()
            })
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn binary_op(
        &self,
        device: DeviceId,
        op: BinaryOp,
        dtype: DType,
        lhs: &Buffer,
        rhs: &Buffer,
        out_shape: &[usize],
        layout: &Layout,
    ) -> Result<Buffer> {
        let len: usize = out_shape.iter().product();
        let (dev, s, out) = self.alloc(device, dtype, len, &[lhs, rhs])?;
        if len == 0 {
            return self.done(out);
        }
        let (a, b, o, n) = (cuda(lhs)?.ptr(), cuda(rhs)?.ptr(), out.ptr(), len as u64);
        let check = op == BinaryOp::Div && !dtype.is_float();
        let geometry = match layout {
            Layout::Same => None,
            Layout::RhsScalar => Some(bcast(op.name(), &[len], &[1], &[0])?),
            Layout::LhsScalar => Some(bcast(op.name(), &[len], &[0], &[1])?),
            Layout::Strided { lhs, rhs } => Some(bcast(op.name(), out_shape, lhs, rhs)?),
        };
        self.with_div_check(&s, check, |err| match geometry {
            None => {
                let f = dev.kernel(Source::Elementwise, op.name(), "same", dtype)?;
                let grid = dev.grid_full(n.div_ceil(16 / dtype.size() as u64).div_ceil(UNROLL), 256);
                // `{op}_same_{dtype}(const T* a, const T* b, T* out, u64 n, int* err)`:
                // SAFETY: `lhs`, `rhs` and `out` each hold `n` = `len` elements of `dtype` (same layout: equal shapes),
                // ready and kept alive on `s` (see `alloc`); `err` is the 4-byte flag of `with_div_check`, or 0 where
                // no op can divide an integer by zero (the kernels touch `err` only then).
                unsafe { dev.launch(f, (grid, 1, 1), (256, 1, 1), s.raw.0, &mut args![a, b, o, n, err]) }
            }
            Some(bc) => {
                let f = dev.kernel(Source::Elementwise, op.name(), "bcast", dtype)?;
                // `{op}_bcast_{dtype}(const T* a, const T* b, T* out, u64 n, Bcast bc, int* err)`:
                // SAFETY: `out` holds `n` = `len` elements; `bc` is the `#[repr(C)]` mirror of the kernel's `Bcast`,
                // built from the checked broadcast strides, so every index it yields lies within `lhs` and `rhs`, ready
                // and kept alive on `s` (see `alloc`); `err` as in the same-layout case.
                unsafe {
                    dev.launch(f, (dev.grid(n, 256), 1, 1), (256, 1, 1), s.raw.0, &mut args![a, b, o, n, bc, err])
                }
            }
        })?;
        self.done(out)
    }

    pub(super) fn binary_scalar_op(
        &self,
        device: DeviceId,
        op: BinaryOp,
        dtype: DType,
        lhs: &Buffer,
        len: usize,
        rhs: Scalar,
    ) -> Result<Buffer> {
        let (dev, stream, out) = self.alloc(device, dtype, len, &[lhs])?;
        if len == 0 {
            return self.done(out);
        }
        let zero_divisor = matches!(rhs, Scalar::I32(0) | Scalar::U8(0));
        if op == BinaryOp::Div && zero_divisor {
            return Err(Error::InvalidArgument { op: "div", reason: "integer division by zero".into() });
        }
        let f = dev.kernel(Source::Elementwise, op.name(), "scalar", dtype)?;
        let (a, o, n, err) = (cuda(lhs)?.ptr(), out.ptr(), len as u64, 0u64);
        let grid = dev.grid_full(n.div_ceil(16 / dtype.size() as u64).div_ceil(UNROLL), 256);
        // `{op}_scalar_{dtype}(const T* a, T s, T* out, u64 n, int* err)`:
        // SAFETY: `lhs` and `out` hold `n` = `len` elements of `dtype`, ready and kept alive on `stream` (see `alloc`);
        // `v` has `dtype`'s Rust type (the tensor layer passes `T::to_scalar` with `T::DTYPE`); `err` is null, which
        // the kernel never touches since an integer zero divisor was refused above.
        with_scalar!(rhs, v => unsafe {
            dev.launch(f, (grid, 1, 1), (256, 1, 1), stream.raw.0, &mut args![a, v, o, n, err])
        })?;
        self.done(out)
    }

    pub(super) fn reduce_op(
        &self,
        device: DeviceId,
        op: ReduceOp,
        dtype: DType,
        x: &Buffer,
        r: Reduction,
    ) -> Result<Buffer> {
        let opname = match op {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
        };
        if op == ReduceOp::Mean {
            float_only("mean", dtype)?;
        }
        let (dev, stream, out) = self.alloc(device, dtype, r.out_len(), &[x])?;
        if r.out_len() == 0 {
            return self.done(out);
        }
        let k = |variant: &'static str| dev.kernel(Source::Reduce, opname, variant, dtype);
        let (xp, o, s) = (cuda(x)?.ptr(), out.ptr(), stream.raw.0);
        let (outer, len, inner) = (r.outer as u64, r.len as u64, r.inner as u64);
        // In every launch below `x` holds `outer * len * inner` elements of `dtype` and
        // `out` `outer * inner` (= `r.out_len()`), both ready and kept alive on `stream`
        // (see `alloc`); the kernels bound their accesses by these counts.
        if outer == 1 && inner == 1 {
            if len <= 1 << 16 {
                // SAFETY: `{op}_single_{dtype}(const T* x, u64 n, T* out)`: `len` elements of
                // `x` into the one element of `out`.
                unsafe { dev.launch(k("single")?, (1, 1, 1), (1024, 1, 1), s, &mut args![xp, len, o])? };
            } else {
                // Accumulator width: f64 for float sums and means and for f64 max, else 4 bytes.
                let acc = if op != ReduceOp::Max && dtype.is_float() || dtype == DType::F64 { 8 } else { 4 };
                let blocks = dev.grid(len.div_ceil(16 / dtype.size() as u64), 256);
                let partial = CudaBuffer::alloc(dev, &stream, blocks as usize * acc)?;
                let (p, nparts) = (partial.ptr(), blocks as u64);
                // SAFETY: `{op}_partial_{dtype}(const T* x, u64 n, A* partial)`: one accumulator per block into
                // `partial`, which holds `blocks` accumulators of `acc` bytes (the kernel's `A`: f64 for float sums and
                // means and f64 max, else 4 bytes), allocated on `stream` and freed there after both launches.
                unsafe { dev.launch(k("partial")?, (blocks, 1, 1), (256, 1, 1), s, &mut args![xp, len, p])? };
                // SAFETY: `{op}_final_{dtype}(const A* partial, u64 nparts, T* out, u64 len)`:
                // the `nparts` = `blocks` accumulators written just before on `stream`, into
                // the one element of `out`.
                unsafe { dev.launch(k("final")?, (1, 1, 1), (1024, 1, 1), s, &mut args![p, nparts, o, len])? };
            }
        } else if inner == 1 {
            let grid = outer.min(dev.sm_count as u64 * 16) as u32;
            // SAFETY: `{op}_rows_{dtype}(const T* x, T* out, u64 outer, u64 len)`: `outer`
            // rows of `len` elements of `x`, one result each into `out` (`outer` elements).
            unsafe { dev.launch(k("rows")?, (grid, 1, 1), (256, 1, 1), s, &mut args![xp, o, outer, len])? };
        } else {
            let grid = dev.grid(outer * inner, 256);
            // SAFETY: `{op}_cols_{dtype}(const T* x, T* out, u64 outer, u64 len, u64 inner)`:
            // `x` as `[outer, len, inner]`, reduced over `len` into `out` (`outer * inner`).
            unsafe { dev.launch(k("cols")?, (grid, 1, 1), (256, 1, 1), s, &mut args![xp, o, outer, len, inner])? };
        }
        self.done(out)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn matmul_op(
        &self,
        device: DeviceId,
        dtype: DType,
        a: &Buffer,
        b: &Buffer,
        m: usize,
        k: usize,
        n: usize,
    ) -> Result<Buffer> {
        let (dev, stream, out) = self.alloc(device, dtype, m * n, &[a, b])?;
        if m == 0 || n == 0 {
            return self.done(out);
        }
        let (ap, bp, o, s) = (cuda(a)?.ptr(), cuda(b)?.ptr(), out.ptr(), stream.raw.0);
        if k == 0 {
            // SAFETY: `out` holds exactly `m * n` elements of `dtype`, allocated on `s`
            // (`stream`, live for the call) and freed there after this memset.
            unsafe { result::memset_d8_async(o, 0, m * n * dtype.size(), s) }
                .map_err(driver(dev.ordinal, "cuMemsetD8Async"))?;
            return self.done(out);
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
                        .map_err(|e| blas_err(device, $name, e))?
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
            let (m, k, n) = (m as u64, k as u64, n as u64);
            let f = dev.kernel(Source::Matrix, "matmul", "", dtype)?;
            // SAFETY: `matmul_{dtype}(const T* a, const T* b, T* out, u64 m, u64 k, u64 n)`:
            // `a`, `b` and `out` hold m*k, k*n and m*n elements of `dtype`, ready and kept
            // alive on `stream` (see `alloc`); the kernel bounds its indices by m, k and n.
            unsafe { dev.launch(f, (gx as u32, gy as u32, 1), (16, 16, 1), s, &mut args![ap, bp, o, m, k, n])? };
        }
        self.done(out)
    }

    pub(super) fn transpose_op(
        &self,
        device: DeviceId,
        dtype: DType,
        x: &Buffer,
        rows: usize,
        cols: usize,
    ) -> Result<Buffer> {
        let (dev, s, out) = self.alloc(device, dtype, rows * cols, &[x])?;
        if rows == 0 || cols == 0 {
            return self.done(out);
        }
        let (gx, gy) = (cols.div_ceil(32), rows.div_ceil(32));
        if gx > i32::MAX as usize || gy > 65535 {
            return Err(Error::InvalidArgument { op: "transpose", reason: format!("[{rows}, {cols}] is too large") });
        }
        let (xp, o, r, c) = (cuda(x)?.ptr(), out.ptr(), rows as u64, cols as u64);
        let f = dev.kernel(Source::Matrix, "transpose", "", dtype)?;
        // SAFETY: `transpose_{dtype}(const T* x, T* out, u64 rows, u64 cols)`: `x` and `out`
        // each hold `rows * cols` elements of `dtype`, ready and kept alive on `s` (see
        // `alloc`); the kernel bounds its indices by `rows` and `cols`.
        unsafe { dev.launch(f, (gx as u32, gy as u32, 1), (32, 8, 1), s.raw.0, &mut args![xp, o, r, c])? };
        self.done(out)
    }

    pub(super) fn concat_op(&self, device: DeviceId, dtype: DType, parts: &[(&Buffer, usize)]) -> Result<Buffer> {
        let len = parts.iter().map(|p| p.1).sum();
        let inputs: Vec<&Buffer> = parts.iter().map(|p| p.0).collect();
        let (_, s, out) = self.alloc(device, dtype, len, &inputs)?;
        let mut at = out.ptr();
        for (buf, _) in parts {
            let b = cuda(buf)?;
            // SAFETY: `out` holds the sum of the parts' lengths, so `at .. at + b.bytes()`
            // (the running offset) lies within it; `b` is a distinct input buffer of
            // `b.bytes()` bytes; both ready and kept alive on `s` (see `alloc`).
            unsafe { Self::dtod(&s, at, b.ptr(), b.bytes())? };
            at += b.bytes() as u64;
        }
        self.done(out)
    }

    pub(super) fn slice_op(
        &self,
        device: DeviceId,
        dtype: DType,
        x: &Buffer,
        offset: usize,
        len: usize,
    ) -> Result<Buffer> {
        let (_, s, out) = self.alloc(device, dtype, len, &[x])?;
        let src = cuda(x)?.ptr() + (offset * dtype.size()) as u64;
        // SAFETY: the caller checked `offset + len` against `x`'s length (Backend
        // contract), so the source range lies within `x`; `out` holds `len` elements; both
        // are ready and kept alive on `s` (see `alloc`), in distinct allocations.
        unsafe { Self::dtod(&s, out.ptr(), src, len * dtype.size())? };
        self.done(out)
    }
}
