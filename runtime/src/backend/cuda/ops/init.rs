//! The ops that make a tensor from nothing: `fill`, `arange` and `rand` (uniform or normal), each one launch
//! of a kernel of init.cu that writes a new buffer and reads none.

use locus_kernels::Source;

use crate::backend::cuda::driver::buffer::CudaBuffer;
use crate::backend::cuda::driver::device::DeviceState;
use crate::backend::cuda::driver::launch::{produce, KernelArgs};
use crate::backend::{float_only, normal_seed, Dist};
use crate::element::{DType, Scalar};
use crate::error::Result;

/// `len` elements of `dtype`, each `value`.
pub(in crate::backend::cuda) fn fill(
    dev: &'static DeviceState,
    dtype: DType,
    len: usize,
    value: Scalar,
) -> Result<CudaBuffer> {
    let n = len as u64;
    // SAFETY: `fill_{dtype}(T* out, u64 n, T v)` gets the output, `n` = `len` (the output's
    // element count) and `value` in its own type, which is `dtype`'s: the tensor layer
    // passes `T::DTYPE` with `value.to_scalar()` of the same `T`.
    unsafe {
        produce(dev, dtype, len, (Source::Init, "fill", n), &[], |out| KernelArgs::new().ptr(out).u64(n).scalar(value))
    }
}

/// `start, start + step, ...`: `len` elements of `dtype`.
pub(in crate::backend::cuda) fn arange(
    dev: &'static DeviceState,
    dtype: DType,
    len: usize,
    start: f64,
    step: f64,
) -> Result<CudaBuffer> {
    let n = len as u64;
    // SAFETY: `arange_{dtype}(T* out, u64 n, f64 start, f64 step)` gets the output, `n` =
    // `len` (the output's element count) and two `f64`s.
    unsafe {
        produce(dev, dtype, len, (Source::Init, "arange", n), &[], |out| {
            KernelArgs::new().ptr(out).u64(n).f64(start).f64(step)
        })
    }
}

/// `len` samples of `dist` of a float `dtype`: uniform in `[0, 1)`, the same for a seed
/// on every backend, or standard normal (the host's expression in the GPU's f64 math).
pub(in crate::backend::cuda) fn rand(
    dev: &'static DeviceState,
    dtype: DType,
    len: usize,
    seed: u64,
    dist: Dist,
) -> Result<CudaBuffer> {
    let op = dist.name();
    float_only(op, dtype)?;
    let seed = match dist {
        Dist::Uniform => seed,
        Dist::Normal => normal_seed(seed),
    };
    let n = len as u64;
    // SAFETY: `{rand,randn}_{f32,f64,bf16,f16}(T* out, u64 n, u64 seed)` (float `dtype`
    // checked above) gets the output, `n` = `len` (the output's element count) and a `u64`.
    unsafe { produce(dev, dtype, len, (Source::Init, op, n), &[], |out| KernelArgs::new().ptr(out).u64(n).u64(seed)) }
}
