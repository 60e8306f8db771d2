//! Matrix ops: the matrix product (2-d, batched, and batched against one shared rhs),
//! the 2-d transpose `t`, and the transpose of any two dims.

use super::Tensor;
use crate::backend::api::precision::float32_matmul_precision;
use crate::backend::{Gemm, Permute};
use crate::device::Device;
use crate::element::{DType, Element};
use crate::error::{Error, Result};
use crate::placement::SamePlacement;
use crate::shape::Shape;
use half::{bf16, f16};

impl<D: Device, T: Element> Tensor<D, T> {
    /// The matrix product. Takes `[m, k] x [k, n] -> [m, n]`, a batch
    /// `[b, m, k] x [b, k, n] -> [b, m, n]`, and a batch against one matrix
    /// `[b, m, k] x [k, n] -> [b, m, n]` (the rhs shared by the whole batch). Other ranks
    /// are an `InvalidArgument` error, inner dims (or batch counts) that differ a
    /// `ShapeMismatch`.
    ///
    /// f32 products follow [`float32_matmul_precision`](crate::float32_matmul_precision)
    /// of the calling thread at the time of the call (exact f32 unless it was changed);
    /// integer products wrap.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let a = Tensor::<Cuda<0>>::from_vec(vec![1.0, 2.0, 3.0, 4.0], [2, 2])?;
    /// let i = Tensor::<Cuda<0>>::from_vec(vec![1.0, 0.0, 0.0, 1.0], [2, 2])?;
    /// assert_eq!(a.matmul(&i)?.to_vec()?, a.to_vec()?);
    ///
    /// // Two products at once, and the same two against one shared matrix.
    /// let batch = Tensor::<Cuda<0>>::from_vec(vec![1.0, 2.0, 3.0, 4.0], [2, 1, 2])?;
    /// let twice = Tensor::<Cuda<0>>::from_vec(vec![2.0, 0.0, 0.0, 2.0], [2, 2])?;
    /// let both = Tensor::concat(&[&twice, &i])?.reshape([2, 2, 2])?;
    /// assert_eq!(batch.matmul(&both)?.to_vec()?, vec![2.0, 4.0, 3.0, 4.0]);
    /// assert_eq!(batch.matmul(&twice)?.shape(), &[2, 1, 2]);
    /// assert!(batch.matmul(&Tensor::<Cuda<0>>::ones([2])?).is_err());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn matmul<E: Device>(&self, rhs: &Tensor<E, T>) -> Result<Self>
    where
        D: SamePlacement<E>,
    {
        self.matmul_any(rhs)
    }

    /// [`matmul`](Self::matmul) without the compile-time placement check (the operands'
    /// device is checked at run time): for backward rules, whose operands are typed by
    /// their inputs.
    pub(crate) fn matmul_any<E: Device>(&self, rhs: &Tensor<E, T>) -> Result<Self> {
        if let Some(half) = self.autocast_to() {
            return self.autocast_product(rhs, half, false);
        }
        let out = self.product(rhs, false, false)?;
        Ok(self.track2(rhs, out, "matmul", |_| {
            let (a, b) = (self.saved(), rhs.saved());
            move |g: Tensor<D, T>, [da, db]: [bool; 2]| {
                // C = A B: dA = dC Bᵀ, dB = Aᵀ dC (over the batch rows for a shared rhs), the
                // transposes read in place by the GEMM.
                let ga = if da { Some(g.product(&b, false, true)?) } else { None };
                let gb = match (db, a.rank(), b.rank()) {
                    (false, ..) => None,
                    (true, 3, 2) => {
                        let (rows, k, n) = (a.shape()[0] * a.shape()[1], a.shape()[2], g.shape()[2]);
                        Some(a.reshape([rows, k])?.product(&g.reshape([rows, n])?, true, false)?)
                    }
                    (true, ..) => Some(a.product(&g, true, false)?),
                };
                Ok((ga, gb.map(|gb| gb.placed(b.placement())).transpose()?))
            }
        }))
    }

    /// `self · rhsᵀ` for a rhs stored `[n, k]` (PyTorch's `F.linear` without bias: a
    /// `Linear` layer's weight as stored), with its gradient, and no transpose copied.
    pub(crate) fn matmul_nt<E: Device>(&self, rhs: &Tensor<E, T>) -> Result<Self> {
        if let Some(half) = self.autocast_to() {
            return self.autocast_product(rhs, half, true);
        }
        let out = self.product(rhs, false, true)?;
        Ok(self.track2(rhs, out, "matmul", |_| {
            let (a, b) = (self.saved(), rhs.saved());
            move |g: Tensor<D, T>, [da, db]: [bool; 2]| {
                // C = A Bᵀ: dA = dC B, dB = dCᵀ A (over the batch rows for a batched lhs).
                let ga = if da { Some(g.product(&b, false, false)?) } else { None };
                let gb = match (db, a.rank(), b.rank()) {
                    (false, ..) => None,
                    (true, 3, 2) => {
                        let (rows, k, n) = (a.shape()[0] * a.shape()[1], a.shape()[2], g.shape()[2]);
                        Some(g.reshape([rows, n])?.product(&a.reshape([rows, k])?, true, false)?)
                    }
                    (true, ..) => Some(g.product(&a, true, false)?),
                };
                Ok((ga, gb.map(|gb| gb.placed(b.placement())).transpose()?))
            }
        }))
    }

    /// The 16-bit type an f32 product computes in here, inside [`crate::autocast`].
    fn autocast_to(&self) -> Option<DType> {
        match crate::autograd::autocast_type() {
            Some(half) if T::DTYPE == DType::F32 => Some(half),
            _ => None,
        }
    }

    /// `self · rhs` (`nt`: `self · rhsᵀ`) computed in `half`: both operands cast to it,
    /// multiplied, the result cast back (each step recorded, so the backward pass runs in
    /// `half` too).
    fn autocast_product<E: Device>(&self, rhs: &Tensor<E, T>, half: DType, nt: bool) -> Result<Self> {
        fn run<D: Device, E: Device, H: Element, T: Element>(
            a: &Tensor<D, T>,
            b: &Tensor<E, T>,
            nt: bool,
        ) -> Result<Tensor<D, T>> {
            let (a, b) = (a.to_dtype::<H>()?, b.to_dtype::<H>()?);
            let y = if nt { a.matmul_nt(&b)? } else { a.matmul_any(&b)? };
            y.to_dtype::<T>()
        }
        match half {
            DType::BF16 => run::<D, E, bf16, T>(self, rhs, nt),
            _ => run::<D, E, f16, T>(self, rhs, nt),
        }
    }

    /// The product of this tensor and `rhs`, each read transposed (its last two dims
    /// swapped) where `ta` or `tb` says, by one GEMM: no autograd.
    pub(crate) fn product<E: Device>(&self, rhs: &Tensor<E, T>, ta: bool, tb: bool) -> Result<Self> {
        self.same_device("matmul", rhs)?;
        let (l, r) = (self.shape(), rhs.shape());
        let logical = |s: &[usize], t: bool| {
            let mut s = s.to_vec();
            if t && s.len() >= 2 {
                let n = s.len();
                s.swap(n - 2, n - 1);
            }
            s
        };
        let (ll, lr) = (logical(l, ta), logical(r, tb));
        let mismatch = || Error::ShapeMismatch { op: "matmul", lhs: ll.clone(), rhs: lr.clone() };
        // Every product of an operand's dims fits a usize (the shapes are checked), so the
        // rhs stride and the `Gemm`'s operand lengths do; the output is checked below.
        let (g, dims) = match (&ll[..], &lr[..]) {
            (&[m, k], &[k2, n]) if k == k2 => (Gemm::single(m, k, n), vec![m, n]),
            (&[b, m, k], &[b2, k2, n]) if k == k2 && b == b2 => {
                (Gemm { batch: b, ..Gemm::single(m, k, n) }, vec![b, m, n])
            }
            (&[b, m, k], &[k2, n]) if k == k2 => {
                (Gemm { batch: b, rhs_stride: 0, ..Gemm::single(m, k, n) }, vec![b, m, n])
            }
            ([_, _], [_, _]) | ([_, _, _], [_, _, _]) | ([_, _, _], [_, _]) => return Err(mismatch()),
            _ => {
                return Err(Error::InvalidArgument {
                    op: "matmul",
                    reason: format!(
                        "takes [m, k] x [k, n], [b, m, k] x [b, k, n] or [b, m, k] x [k, n], not {l:?} x {r:?}"
                    ),
                })
            }
        };
        let out = Shape::result("matmul", dims, T::DTYPE, &[l, r])?;
        let g = Gemm { precision: float32_matmul_precision(), ta, tb, ..g };
        let buf = self.queued("matmul")?.matmul(rhs.buffer(), T::DTYPE, g)?;
        Ok(self.with_buffer(buf, out))
    }

    /// The transpose of a 2-d tensor (PyTorch's `t`); other ranks are an error. For any
    /// two dims of any rank, [`transpose`](Self::transpose).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu>::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3])?;
    /// let tt = t.t()?;
    /// assert_eq!(tt.shape(), &[3, 2]);
    /// assert_eq!(tt.to_vec()?, vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    /// assert!(Tensor::<Cpu>::zeros([2, 3, 4])?.t().is_err());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn t(&self) -> Result<Self> {
        self.check_rank("t", 2)?;
        let (rows, cols) = (self.shape[0], self.shape[1]);
        let out = Shape::new("t", [cols, rows], T::DTYPE)?;
        let buf = self.queued("t")?.transpose(T::DTYPE, rows, cols)?;
        let out = self.with_buffer(buf, out);
        Ok(self.track1(out, "t", |_| |g: Self| g.t()))
    }

    /// A contiguous copy with dims `d0` and `d1` swapped (PyTorch's `transpose`), for a
    /// tensor of any rank; `d0 == d1` is a plain copy, a dim out of range an error.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let x = Tensor::<Cpu, i32>::arange(0, 24, 1)?.reshape([2, 3, 4])?;
    /// let y = x.transpose(0, 2)?;
    /// assert_eq!(y.shape(), &[4, 3, 2]);
    /// // y[i][j][k] == x[k][j][i]
    /// assert_eq!(y.to_vec()?[..6], [0, 12, 4, 16, 8, 20]);
    /// assert_eq!(x.transpose(1, 1)?.to_vec()?, x.to_vec()?);
    /// assert!(x.transpose(0, 3).is_err());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn transpose(&self, d0: usize, d1: usize) -> Result<Self> {
        self.check_dim("transpose", d0)?;
        self.check_dim("transpose", d1)?;
        let mut perm: Vec<usize> = (0..self.rank()).collect();
        perm.swap(d0, d1);
        let mut dims = self.shape.to_vec();
        dims.swap(d0, d1);
        let out = Shape::new("transpose", dims, T::DTYPE)?;
        let p = Permute::new("transpose", &self.shape, &perm)?;
        let buf = self.queued("transpose")?.permute(T::DTYPE, &p)?;
        let out = self.with_buffer(buf, out);
        Ok(self.track1(out, "transpose", |_| move |g: Self| g.transpose(d0, d1)))
    }

    pub(super) fn check_rank(&self, op: &'static str, rank: usize) -> Result<()> {
        if self.rank() != rank {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("needs a {rank}-d tensor, got shape {:?}", self.shape()),
            });
        }
        Ok(())
    }
}
