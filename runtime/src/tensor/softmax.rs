//! `softmax`, `log_softmax` over any dim and `cross_entropy` of logits and class targets:
//! one backend call each over the `[outer, len, inner]` view of the dim
//! (`shape::Reduction`), computed stably (the slice's maximum subtracted first); and
//! LayerNorm over the last dim, one backend call forward and one backward.

use super::Tensor;
use crate::backend::{bad_target, BinaryOp, Norm, SoftmaxOp, UnaryOp};
use crate::device::Device;
use crate::element::{Float, IndexElement};
use crate::error::{Error, Result};
use crate::placement::SamePlacement;
use crate::shape::{Reduction, Shape};

impl<D: Device, T: Float> Tensor<D, T> {
    /// `exp(x - max) / sum(exp(x - max))` over `dim` (PyTorch's `softmax(x, dim)`): each
    /// slice along `dim` sums to 1. `-inf` entries get 0; a slice of only `-inf`, or one
    /// holding `+inf` or NaN, is NaN throughout, as in PyTorch. A 0-d tensor takes dim 0
    /// and gives 1.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let x = Tensor::<Cpu>::from_vec(vec![1.0, 1.0, 2.0, 2.0, 1000.0, f32::NEG_INFINITY], [3, 2])?;
    /// let rows = x.softmax(1)?.to_vec()?;
    /// assert_eq!(rows, vec![0.5, 0.5, 0.5, 0.5, 1.0, 0.0]);
    /// let cols = x.softmax(0)?;
    /// assert_eq!(cols.shape(), &[3, 2]);
    /// assert!(x.softmax(2).is_err());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn softmax(&self, dim: usize) -> Result<Self> {
        self.softmax_op(SoftmaxOp::Softmax, dim)
    }

    /// `x - max - log(sum(exp(x - max)))` over `dim` (PyTorch's `log_softmax(x, dim)`):
    /// the logarithm of [`Tensor::softmax`], without its underflow (`-1000` stays finite
    /// where `softmax` rounds to 0).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let x = Tensor::<Cpu, f64>::from_vec(vec![0.0, 0.0, -1000.0, 0.0], [2, 2])?;
    /// let y = x.log_softmax(1)?.to_vec()?;
    /// assert_eq!(y[0], -std::f64::consts::LN_2);
    /// assert_eq!(y[2], -1000.0);
    /// assert_eq!(y[3], 0.0);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn log_softmax(&self, dim: usize) -> Result<Self> {
        self.softmax_op(SoftmaxOp::LogSoftmax, dim)
    }

    fn softmax_op(&self, op: SoftmaxOp, dim: usize) -> Result<Self> {
        let r = if self.rank() == 0 && dim == 0 {
            // PyTorch's convention: a scalar is its own one-element slice.
            Reduction::all(1)
        } else {
            // An error naming the shape for a dim it lacks.
            Reduction::over(op.name(), &self.shape, dim)?
        };
        let buf = self.queued("softmax")?.softmax(None, op, T::DTYPE, r)?;
        let out = self.with_buffer(buf, self.shape.clone());
        Ok(self.track1(out, op.name(), |out| {
            let y = out.saved();
            {
                move |g: Tensor<_, _>| {
                    if y.rank() == 0 {
                        // A one-element slice: the output is constant.
                        return g.scaled(0.0);
                    }
                    if r.inner == 1 {
                        // Over the last dim: one kernel.
                        let dx = y.queued(op.name())?.softmax(Some(g.buffer()), op, T::DTYPE, r)?;
                        return Ok(y.with_buffer(dx, y.shape.clone()));
                    }
                    match op {
                        // dx = y (g − Σ g y)
                        SoftmaxOp::Softmax => {
                            let gy = g.times(&y)?;
                            let s = gy.sum_dim(dim, true)?;
                            gy.binary(BinaryOp::Sub, &y.times(&s)?)
                        }
                        // dx = g − softmax(x) Σ g
                        SoftmaxOp::LogSoftmax => {
                            let s = g.sum_dim(dim, true)?;
                            g.binary(BinaryOp::Sub, &y.unary(UnaryOp::Exp)?.times(&s)?)
                        }
                    }
                }
            }
        }))
    }

    /// LayerNorm over the last dim (PyTorch's `layer_norm(x, [len], weight, bias, eps)`):
    /// each row becomes `(x - mean) / sqrt(var + eps)`, the variance biased, then with
    /// `affine` = `(weight, bias)` (`[len]` each, on this tensor's device) times the weight
    /// plus the bias. One kernel, and for the gradients one (the input's) or with `affine`
    /// two (then the weight's and the bias's: sums over the rows), where the composed ops
    /// took a dozen.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let x = Tensor::<Cpu>::from_vec(vec![1.0, 3.0, -2.0, 2.0], [2, 2])?;
    /// assert_eq!(x.layer_norm(None, 0.0)?.to_vec()?, vec![-1.0, 1.0, -1.0, 1.0]);
    /// let (w, b) = (Tensor::from_vec(vec![2.0, 1.0], [2])?, Tensor::from_vec(vec![0.5, 0.0], [2])?);
    /// assert_eq!(x.layer_norm(Some((&w, &b)), 0.0)?.to_vec()?, vec![-1.5, 1.0, -1.5, 1.0]);
    /// assert!(x.layer_norm(Some((&w, &Tensor::zeros([3])?)), 1e-5).is_err());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn layer_norm(&self, affine: Option<(&Self, &Self)>, eps: f64) -> Result<Self> {
        const OP: &str = "layer_norm";
        let Some(&len) = self.shape().last() else {
            return Err(Error::InvalidArgument { op: OP, reason: "a 0-d tensor has no dim to normalise".into() });
        };
        for p in affine.iter().flat_map(|&(w, b)| [w, b]) {
            self.same_device(OP, p)?;
            if p.shape() != [len] {
                return Err(Error::ShapeMismatch { op: OP, lhs: self.shape().to_vec(), rhs: p.shape().to_vec() });
            }
        }
        let n = Norm { rows: self.numel().checked_div(len).unwrap_or(0), len, eps };
        let bufs = match affine {
            Some((w, b)) => Some((w.queued(OP)?, b.queued(OP)?)),
            None => None,
        };
        let out = self.with_buffer(self.queued(OP)?.layer_norm(bufs, T::DTYPE, n)?, self.shape.clone());
        let Some((w, b)) = affine else {
            return Ok(self.track1(out, OP, |_| {
                let x = self.saved();
                move |g: Tensor<_, _>| {
                    let (dx, _) = x.queued(OP)?.layer_norm_back(g.buffer(), None, T::DTYPE, n)?;
                    Ok(x.with_buffer(dx, x.shape.clone()))
                }
            }));
        };
        Ok(Self::track_all(&[self, w, b], out, OP, |_| {
            let (x, w) = (self.saved(), w.saved());
            move |g: Tensor<_, _>, needs: &[bool]| {
                let (dx, params) = x.queued(OP)?.layer_norm_back(g.buffer(), Some(w.queued(OP)?), T::DTYPE, n)?;
                let (dw, db) = params.ok_or_else(|| Error::InvalidArgument {
                    op: OP,
                    reason: "internal: the backend gave no weight and bias gradients".into(),
                })?;
                let at = |buf, like: &Self| like.with_buffer(buf, like.shape.clone());
                Ok(vec![needs[0].then(|| at(dx, &x)), needs[1].then(|| at(dw, &w)), needs[2].then(|| at(db, &w))])
            }
        }))
    }

    /// The cross-entropy of logits `[N, C]` (this tensor) against class indices
    /// `targets` `[N]`, averaged over the N samples: the mean of
    /// `-log_softmax(logits, 1)[i, targets[i]]`, as a 0-d tensor (PyTorch's
    /// `cross_entropy(logits, targets)` with its default mean reduction; NaN for N = 0).
    /// Each row of logits is read once. A target outside `[0, C)` is an
    /// `InvalidArgument` naming the first such sample; a shape other than `[N, C]` and
    /// `[N]` is an error too. The targets live where the logits do (checked at compile
    /// time for static placements, at run time for `Dyn`), and are `i32` or `i64`
    /// (PyTorch's class index type; see [`IndexElement`]).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let logits = Tensor::<Cpu>::from_vec(vec![0.0, 0.0, 0.0, 0.0, 10.0, -10.0], [2, 3])?;
    /// let targets = Tensor::<Cpu, i32>::from_vec(vec![2, 1], [2])?;
    /// let loss = logits.cross_entropy(&targets)?.item()?;
    /// // Row 0: ln 3. Row 1: log(e^0 + e^10 + e^-10) - 10.
    /// let want = (3.0f32.ln() + (1.0 + (-10.0f32).exp() + (-20.0f32).exp()).ln()) / 2.0;
    /// assert!((loss - want).abs() < 1e-5);
    /// let bad = Tensor::<Cpu, i32>::from_vec(vec![0, 3], [2])?;
    /// assert!(logits.cross_entropy(&bad).is_err());
    /// let wide = Tensor::<Cpu, i64>::from_vec(vec![2, 1], [2])?;
    /// assert_eq!(logits.cross_entropy(&wide)?.item()?, loss);
    /// # Ok::<(), locus::Error>(())
    /// ```
    ///
    /// Targets on another placement do not compile:
    ///
    /// ```text
    /// use locus::{Cpu, Cuda, Tensor};
    /// let logits = Tensor::<Cuda<0>>::zeros([2, 3])?;
    /// let targets = Tensor::<Cpu, i32>::zeros([2])?;
    /// let _ = logits.cross_entropy(&targets)?; // tensors on `Cuda<0>` and `Cpu` cannot be used in one op
    /// ```
    pub fn cross_entropy<E: Device, I: IndexElement>(&self, targets: &Tensor<E, I>) -> Result<Self>
    where
        D: SamePlacement<E>,
    {
        const OP: &str = "cross_entropy";
        self.same_device_as(OP, targets.device())?;
        if self.rank() != 2 || targets.rank() != 1 {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: format!(
                    "needs logits of shape [N, C] and targets of shape [N], got {:?} and {:?}",
                    self.shape(),
                    targets.shape()
                ),
            });
        }
        let (n, c) = (self.shape[0], self.shape[1]);
        if targets.shape[0] != n {
            return Err(Error::ShapeMismatch { op: OP, lhs: self.shape.to_vec(), rhs: targets.shape.to_vec() });
        }
        let targets = targets.as_i32_indices(OP, c, |row, t| bad_target(row, t, c))?;
        self.cross_entropy_i32(&targets, n, c)
    }

    /// [`Tensor::cross_entropy`] of `[n, c]` logits with `i32` targets on the same device,
    /// the shapes checked.
    fn cross_entropy_i32<E: Device>(&self, targets: &Tensor<E, i32>, n: usize, c: usize) -> Result<Self> {
        const OP: &str = "cross_entropy";
        let losses = self.queued("cross_entropy")?.cross_entropy_rows(targets.buffer(), T::DTYPE, n, c)?;
        let losses = self.with_buffer(losses, Shape::new(OP, [n], T::DTYPE)?);
        // d loss_i / d x_i = (softmax(x_i) − onehot(t_i)) g_i, one backend call.
        let losses = self.track1(losses, OP, |_| {
            let (x, t) = (self.saved(), targets.saved());
            move |g: Tensor<_, _>| {
                let dx = x.queued(OP)?.cross_entropy_back(t.buffer(), g.buffer(), T::DTYPE, n, c)?;
                Ok(x.with_buffer(dx, x.shape.clone()))
            }
        });
        losses.mean()
    }
}
