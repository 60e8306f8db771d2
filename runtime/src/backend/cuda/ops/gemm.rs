//! Matrix products ([`Gemm`]) on the cuda backend. Floats go to cuBLAS: exact f32 and f64
//! through `cublas{S,D}gemm` (strided-batched for a batch), reduced f32 precisions through
//! `cublasGemmEx` (`cublasGemmStridedBatchedEx`) with the compute type that asks for TF32
//! or bf16 tensor cores, and bf16 and f16 through the same calls on 16-bit elements with
//! f32 accumulation. A rhs shared by the batch is one tall product. Integers run the
//! batched tiled kernel `matmul_{T}` of matrix.cu.

use std::ffi::c_void;

use cudarc::cublas::sys::{cublasComputeType_t, cublasGemmAlgo_t, cublasOperation_t, cudaDataType};
use cudarc::driver::result;
use locus_kernels::Source;

use crate::backend::cuda::driver::buffer::CudaBuffer;
use crate::backend::cuda::driver::device::driver;
use crate::backend::cuda::driver::launch::KernelArgs;
use crate::backend::cuda::driver::memory::{alloc, done};
use crate::backend::cuda::driver::stream::blas_err;
use crate::backend::cuda::driver::timing;
use crate::backend::{Gemm, MatmulPrecision};
use crate::element::DType;
use crate::error::{Error, Result};
use crate::faults::{gate, Point};

/// Which cuBLAS routine runs a float product.
#[derive(Clone, Copy, Debug)]
enum Routine {
    /// `cublasSgemm` / `cublasSgemmStridedBatched`.
    S,
    /// `cublasDgemm` / `cublasDgemmStridedBatched`.
    D,
    /// `cublasGemmEx` / `cublasGemmStridedBatchedEx` on elements of `ty`, computed as
    /// `compute` says, with f32 `alpha` and `beta`.
    Ex { ty: cudaDataType, compute: cublasComputeType_t },
}

/// The routine for `dtype` at `precision`.
fn routine(dtype: DType, precision: MatmulPrecision) -> Result<Routine> {
    let f32_ex = |compute| Routine::Ex { ty: cudaDataType::CUDA_R_32F, compute };
    Ok(match (dtype, precision) {
        (DType::F32, MatmulPrecision::Highest) => Routine::S,
        (DType::F32, MatmulPrecision::High) => f32_ex(cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32),
        (DType::F32, MatmulPrecision::Medium) => f32_ex(cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_16BF),
        (DType::F64, _) => Routine::D,
        // 16-bit inputs and output, f32 accumulation (and f32 alpha and beta), as PyTorch.
        (DType::BF16, _) => {
            Routine::Ex { ty: cudaDataType::CUDA_R_16BF, compute: cublasComputeType_t::CUBLAS_COMPUTE_32F }
        }
        (DType::F16, _) => {
            Routine::Ex { ty: cudaDataType::CUDA_R_16F, compute: cublasComputeType_t::CUBLAS_COMPUTE_32F }
        }
        _ => {
            return Err(Error::InvalidArgument { op: "matmul", reason: format!("cuBLAS has no {dtype} product here") })
        }
    })
}

/// `batch` products `[m, k] x [k, n]`, row-major, as `g` lays them out.
pub(in crate::backend::cuda) fn matmul(a: &CudaBuffer, b: &CudaBuffer, dtype: DType, g: Gemm) -> Result<CudaBuffer> {
    let Some((_, _, len)) = g.lens() else {
        return Err(Error::InvalidArgument { op: "matmul", reason: format!("{g:?} has too many elements") });
    };
    let dev = a.device();
    let (stream, out) = alloc(dev, dtype, len, &[a, b])?;
    if len == 0 {
        return done(out);
    }
    if g.k == 0 {
        // SAFETY: `out` holds exactly `len` elements of `dtype`, allocated on `stream`
        // (live for the call) and freed there after this memset.
        unsafe { result::memset_d8_async(out.ptr(), 0, len * dtype.size(), stream.raw.0) }
            .map_err(driver(dev.ordinal, "cuMemsetD8Async"))?;
        return done(out);
    }
    g.check_integer(dtype)?;
    if !dtype.is_float() {
        return integer(a, b, &out, dtype, g, &stream).and_then(|()| done(out));
    }
    // A shared rhs is one tall product when its rows fit cuBLAS's `int`; else a batch
    // whose rhs stride is 0.
    let g = match g.folded() {
        f if f.m <= i32::MAX as usize => f,
        _ => g,
    };
    let Gemm { batch, m, k, n, rhs_stride, precision, ta, tb } = g;
    let int = |x: usize| i32::try_from(x).ok();
    let long = |x: usize| i64::try_from(x).ok();
    let (Some(mi), Some(ni), Some(ki), Some(bi)) = (int(m), int(n), int(k), int(batch)) else {
        return Err(Error::InvalidArgument {
            op: "matmul",
            reason: format!("[{m}, {k}] x [{k}, {n}] in a batch of {batch}: dims beyond i32::MAX do not fit cuBLAS"),
        });
    };
    // Element counts of existing buffers: each fits an i64.
    let (Some(sa), Some(sb), Some(sc)) = (long(m * k), long(rhs_stride), long(m * n)) else {
        return Err(Error::InvalidArgument { op: "matmul", reason: "batch strides beyond i64::MAX".into() });
    };
    let routine = routine(dtype, precision)?;
    // The output may come from the stream's block cache, with no driver call that would
    // have made this device's context current: cuBLAS needs it current.
    dev.bind()?;
    // The stream's own handle, bound to it once: no other thread can move it to another
    // stream between binding and the gemm.
    let h = stream.blas()?;
    let (ap, bp, op) = (a.ptr(), b.ptr(), out.ptr());
    // Row-major C = A B is column-major C^T = B^T A^T: swap operands. A row-major operand
    // read column-major is its transpose (no op, leading dim its row length); one stored
    // transposed is read with CUBLAS_OP_T and the other leading dim.
    let op_of = |t: bool| if t { cublasOperation_t::CUBLAS_OP_T } else { cublasOperation_t::CUBLAS_OP_N };
    let (opb, opa) = (op_of(tb), op_of(ta));
    let (Some(ldb), Some(lda)) = (int(if tb { k } else { n }), int(if ta { m } else { k })) else {
        return Err(Error::InvalidArgument { op: "matmul", reason: "leading dims beyond i32::MAX".into() });
    };
    let (one32, zero32, one64, zero64) = (1.0f32, 0.0f32, 1.0f64, 0.0f64);
    let algo = cublasGemmAlgo_t::CUBLAS_GEMM_DFALT;
    let name = match (routine, batch) {
        (Routine::S, 1) => "cublasSgemm",
        (Routine::S, _) => "cublasSgemmStridedBatched",
        (Routine::D, 1) => "cublasDgemm",
        (Routine::D, _) => "cublasDgemmStridedBatched",
        (Routine::Ex { .. }, 1) => "cublasGemmEx",
        (Routine::Ex { .. }, _) => "cublasGemmStridedBatchedEx",
    };
    // `ap`, `bp` and `op` are buffers of this device of `batch * m * k`, `k * n` (shared,
    // stride 0) or `batch * k * n`, and `batch * m * n` elements of `dtype` (sized so by the
    // tensor layer; `len` is the output's), ready and kept alive on `stream` (see `alloc`);
    // product `i` reads at `i * sa` and `i * sb` and writes at `i * sc`, within them.
    // As said above; `h` is `stream`'s own cuBLAS handle, bound to it, and this device's context is current.
    // The leading dimensions (ldb, lda, n) are those of the operands as stored, read as column-major; all dims and the
    // batch fit an `i32` and the strides an `i64` (checked above). `alpha`/`beta` point at locals of the element
    // type the routine reads (f64 for D, f32 for S and for Ex, whose compute types are all 32F), alive for the call.
    let failed =
        || cudarc::cublas::result::CublasError(cudarc::cublas::sys::cublasStatus_t::CUBLAS_STATUS_EXECUTION_FAILED);
    let span = timing::begin(&stream);
    // SAFETY: for the reasons in the comment just above.
    let r = gate(Point::Launch, failed, || unsafe {
        use cudarc::cublas::result as blas;
        match (routine, batch) {
            (Routine::S, 1) => blas::sgemm(
                h,
                opb,
                opa,
                ni,
                mi,
                ki,
                &one32,
                bp as *const f32,
                ldb,
                ap as *const f32,
                lda,
                &zero32,
                op as *mut f32,
                ni,
            ),
            (Routine::S, _) => blas::sgemm_strided_batched(
                h,
                opb,
                opa,
                ni,
                mi,
                ki,
                &one32,
                bp as *const f32,
                ldb,
                sb,
                ap as *const f32,
                lda,
                sa,
                &zero32,
                op as *mut f32,
                ni,
                sc,
                bi,
            ),
            (Routine::D, 1) => blas::dgemm(
                h,
                opb,
                opa,
                ni,
                mi,
                ki,
                &one64,
                bp as *const f64,
                ldb,
                ap as *const f64,
                lda,
                &zero64,
                op as *mut f64,
                ni,
            ),
            (Routine::D, _) => blas::dgemm_strided_batched(
                h,
                opb,
                opa,
                ni,
                mi,
                ki,
                &one64,
                bp as *const f64,
                ldb,
                sb,
                ap as *const f64,
                lda,
                sa,
                &zero64,
                op as *mut f64,
                ni,
                sc,
                bi,
            ),
            (Routine::Ex { ty, compute }, 1) => blas::gemm_ex(
                h,
                opb,
                opa,
                ni,
                mi,
                ki,
                (&one32 as *const f32).cast::<c_void>(),
                bp as *const c_void,
                ty,
                ldb,
                ap as *const c_void,
                ty,
                lda,
                (&zero32 as *const f32).cast::<c_void>(),
                op as *mut c_void,
                ty,
                ni,
                compute,
                algo,
            ),
            (Routine::Ex { ty, compute }, _) => blas::gemm_strided_batched_ex(
                h,
                opb,
                opa,
                ni,
                mi,
                ki,
                (&one32 as *const f32).cast::<c_void>(),
                bp as *const c_void,
                ty,
                ldb,
                sb,
                ap as *const c_void,
                ty,
                lda,
                sa,
                (&zero32 as *const f32).cast::<c_void>(),
                op as *mut c_void,
                ty,
                ni,
                sc,
                bi,
                compute,
                algo,
            ),
        }
    });
    let r = r.map_err(|e| blas_err(dev.ordinal, name, e));
    timing::finish(span, &stream, &r, || (name.into(), format!(r#""m":{m},"n":{n},"k":{k},"batch":{batch}"#)));
    r?;
    done(out)
}

/// The integer products of `g` by the batched kernel `matmul_{T}`, into `out`.
fn integer(
    a: &CudaBuffer,
    b: &CudaBuffer,
    out: &CudaBuffer,
    dtype: DType,
    g: Gemm,
    stream: &crate::backend::cuda::driver::stream::CudaStream,
) -> Result<()> {
    let Gemm { batch, m, k, n, rhs_stride, .. } = g;
    let dev = a.device();
    let (gx, gy) = (n.div_ceil(16), m.div_ceil(16));
    if gx > i32::MAX as usize || gy > 65535 {
        return Err(Error::InvalidArgument {
            op: "matmul",
            reason: format!("[{m}, {k}] x [{k}, {n}] is too large for the integer kernel"),
        });
    }
    // The kernel loops over the batch from blockIdx.z.
    let gz = batch.clamp(1, 65535);
    let f = dev.kernel(Source::Matrix, "matmul", "", dtype)?;
    let args = KernelArgs::new()
        .ptr(a)
        .ptr(b)
        .ptr(out)
        .u64(m as u64)
        .u64(k as u64)
        .u64(n as u64)
        .u64(batch as u64)
        .u64(rhs_stride as u64);
    // `matmul_{dtype}(const T* a, const T* b, T* out, u64 m, u64 k, u64 n, u64 batch, u64 rhs_stride)`: `a`, `b`
    // and `out` hold batch*m*k, k*n (rhs_stride 0) or batch*k*n, and batch*m*n elements of `dtype`, ready and kept
    // alive on `stream` (see `alloc`);
    // SAFETY: as said above; the kernel bounds its indices by m, k, n and batch, and steps the rhs by rhs_stride.
    unsafe { dev.launch(f, (gx as u32, gy as u32, gz as u32), (16, 16, 1), stream, args) }
}
