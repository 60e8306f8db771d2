//! The shape of a matrix product as both backends receive it: a batch of row-major
//! products, a rhs that may be shared by the batch, operands that may be stored
//! transposed, and the f32 precision.

use super::precision::MatmulPrecision;

/// The shapes of `batch` row-major matrix products `[m, k] x [k, n]`, one after another
/// in each operand: product `i` reads the lhs at `i * m * k`, the rhs at `i * rhs_stride`,
/// and writes the output at `i * m * n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Gemm {
    pub batch: usize,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// Elements from one product's rhs to the next: `k * n`, or 0 for one `[k, n]` rhs
    /// shared by the whole batch.
    pub rhs_stride: usize,
    /// How an f32 product is computed; other types ignore it.
    pub precision: MatmulPrecision,
    /// The lhs is stored transposed: each product reads `[k, m]` row-major as its
    /// `[m, k]` (float types only; a backward pass's `Aᵀ · g` without a copy).
    pub ta: bool,
    /// The rhs is stored transposed: `[n, k]` read as `[k, n]` (float types only).
    pub tb: bool,
}

impl Gemm {
    /// One `[m, k] x [k, n]` product, exact.
    pub(crate) fn single(m: usize, k: usize, n: usize) -> Gemm {
        Gemm { batch: 1, m, k, n, rhs_stride: k * n, precision: MatmulPrecision::Highest, ta: false, tb: false }
    }

    /// An `Err` for an integer product with a transposed operand (the float GEMMs take
    /// strides; the integer kernels do not, and nothing asks them to).
    pub(crate) fn check_integer(&self, dtype: crate::element::DType) -> crate::error::Result<()> {
        if (self.ta || self.tb) && !dtype.is_float() {
            return Err(crate::error::Error::InvalidArgument {
                op: "matmul",
                reason: format!("transposed operands are for float products, not {dtype}"),
            });
        }
        Ok(())
    }

    /// Elements of the lhs, the rhs and the output; `None` if one overflows (an empty
    /// product's dims may be huge).
    pub(crate) fn lens(&self) -> Option<(usize, usize, usize)> {
        let lhs = self.batch.checked_mul(self.m)?.checked_mul(self.k)?;
        let rhs =
            if self.rhs_stride == 0 { self.k.checked_mul(self.n)? } else { self.batch.checked_mul(self.rhs_stride)? };
        Some((lhs, rhs, self.batch.checked_mul(self.m)?.checked_mul(self.n)?))
    }

    /// The same products with a shared rhs folded into one `[batch * m, k] x [k, n]`
    /// product (the lhs and output batches lie end to end); `self` if the rhs is not
    /// shared or the rows overflow.
    pub(crate) fn folded(self) -> Gemm {
        match self.batch.checked_mul(self.m) {
            Some(rows) if self.rhs_stride == 0 && !self.ta => {
                Gemm { batch: 1, m: rows, rhs_stride: self.k * self.n, ..self }
            }
            _ => self,
        }
    }
}
