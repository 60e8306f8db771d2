//! How f32 matrix products are computed (PyTorch's `torch.set_float32_matmul_precision`):
//! exactly in f32, the default, or faster on tensor cores from inputs rounded to TF32 or
//! bf16. One process-wide setting, and a scoped one per thread above it. The tensor layer
//! reads the setting when an op is called, on the calling thread, and hands it to the
//! backends in the op's [`Gemm`](crate::backend::Gemm): a job a simulated stream runs later, on
//! its own thread, computes with the precision its caller asked for.

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};

/// How an f32 matrix product is computed: PyTorch's `"highest"`, `"high"` and `"medium"`
/// of `torch.set_float32_matmul_precision`. Other element types are not affected.
///
/// On the cuda backend, `High` is cuBLAS's `CUBLAS_COMPUTE_32F_FAST_TF32` (TF32 tensor
/// cores: inputs keep 10 of their 23 mantissa bits, products are accumulated in f32) and
/// `Medium` is `CUBLAS_COMPUTE_32F_FAST_16BF` (inputs rounded to bf16, 7 mantissa bits,
/// accumulated in f32). The host backend models both faithfully: it rounds every input to
/// TF32 or bf16 (to nearest, ties to even) and multiplies the rounded values in f32, so
/// its results agree with the GPU's within the tolerance of that rounding.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{with_float32_matmul_precision, Cpu, MatmulPrecision, Tensor};
/// // 1 + 2^-20 keeps its low bit in f32; TF32 rounds it to 1.
/// let a = Tensor::<Cpu>::from_vec(vec![1.0 + 2f32.powi(-20)], [1, 1])?;
/// let one = Tensor::<Cpu>::ones([1, 1])?;
/// assert_eq!(a.matmul(&one)?.item()?, 1.0 + 2f32.powi(-20));
/// let tf32 = with_float32_matmul_precision(MatmulPrecision::High, || a.matmul(&one))?;
/// assert_eq!(tf32.item()?, 1.0);
/// # Ok::<(), locus::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MatmulPrecision {
    /// Exact f32 arithmetic (cuBLAS `sgemm`): the default.
    #[default]
    Highest,
    /// TF32 tensor cores: inputs rounded to 10 mantissa bits, f32 accumulation.
    High,
    /// bf16 tensor cores: inputs rounded to 7 mantissa bits, f32 accumulation.
    Medium,
}

impl MatmulPrecision {
    /// PyTorch's name for it: `"highest"`, `"high"` or `"medium"`.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// assert_eq!(locus::MatmulPrecision::High.name(), "high");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            MatmulPrecision::Highest => "highest",
            MatmulPrecision::High => "high",
            MatmulPrecision::Medium => "medium",
        }
    }

    const fn code(self) -> u8 {
        match self {
            MatmulPrecision::Highest => 0,
            MatmulPrecision::High => 1,
            MatmulPrecision::Medium => 2,
        }
    }

    const fn from_code(code: u8) -> Self {
        match code {
            1 => MatmulPrecision::High,
            2 => MatmulPrecision::Medium,
            _ => MatmulPrecision::Highest,
        }
    }
}

impl fmt::Display for MatmulPrecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The process-wide precision, as [`MatmulPrecision::code`].
static PROCESS: AtomicU8 = AtomicU8::new(0);

thread_local! {
    /// The innermost [`with_float32_matmul_precision`] of this thread, if any.
    static SCOPED: Cell<Option<MatmulPrecision>> = const { Cell::new(None) };
}

/// Sets the precision of f32 matrix products for the whole process (PyTorch's
/// `torch.set_float32_matmul_precision`). A thread inside
/// [`with_float32_matmul_precision`] keeps its scoped precision until the scope ends.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{float32_matmul_precision, set_float32_matmul_precision, MatmulPrecision};
/// set_float32_matmul_precision(MatmulPrecision::High);
/// assert_eq!(float32_matmul_precision(), MatmulPrecision::High);
/// set_float32_matmul_precision(MatmulPrecision::Highest);
/// ```
pub fn set_float32_matmul_precision(precision: MatmulPrecision) {
    PROCESS.store(precision.code(), Ordering::Relaxed);
}

/// The precision f32 matrix products called on this thread use now: the innermost
/// [`with_float32_matmul_precision`] of this thread, else the process-wide setting
/// (`Highest` unless [`set_float32_matmul_precision`] changed it).
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{float32_matmul_precision, MatmulPrecision};
/// assert_eq!(float32_matmul_precision(), MatmulPrecision::Highest);
/// ```
pub fn float32_matmul_precision() -> MatmulPrecision {
    SCOPED.with(Cell::get).unwrap_or_else(|| MatmulPrecision::from_code(PROCESS.load(Ordering::Relaxed)))
}

/// Runs `f` with f32 matrix products on this thread computed at `precision`, then puts the
/// thread's previous setting back, also when `f` panics. Other threads are not affected;
/// scopes nest.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{float32_matmul_precision, with_float32_matmul_precision, MatmulPrecision};
/// let inside = with_float32_matmul_precision(MatmulPrecision::Medium, float32_matmul_precision);
/// assert_eq!(inside, MatmulPrecision::Medium);
/// assert_eq!(float32_matmul_precision(), MatmulPrecision::Highest);
/// ```
pub fn with_float32_matmul_precision<R>(precision: MatmulPrecision, f: impl FnOnce() -> R) -> R {
    /// Puts the previous scoped value back when dropped: on return and on unwinding.
    struct Restore(Option<MatmulPrecision>);
    impl Drop for Restore {
        fn drop(&mut self) {
            SCOPED.with(|s| s.set(self.0));
        }
    }
    let _restore = Restore(SCOPED.with(|s| s.replace(Some(precision))));
    f()
}
