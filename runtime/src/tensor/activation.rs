//! The activations: `relu`, for every element type, and the float ones, `log`, `tanh`,
//! `sigmoid`, `gelu` and `gelu_tanh`. Each is one elementwise backend call ([`UnaryOp`]); the GPU computes in the element's float type
//! (`logf`, `erff`, ... for f32), the host backend in f64, rounded once.

use super::Tensor;
use crate::backend::UnaryOp;
use crate::device::Device;
use crate::element::{Element, Float};
use crate::error::Result;

impl<D: Device, T: Element> Tensor<D, T> {
    /// `max(x, 0)` elementwise.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu>::from_vec(vec![-1.0, 2.0], [2])?;
    /// assert_eq!(t.relu()?.to_vec()?, vec![0.0, 2.0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn relu(&self) -> Result<Self> {
        self.unary(UnaryOp::Relu)
    }
}

impl<D: Device, T: Float> Tensor<D, T> {
    /// The natural logarithm elementwise: `log(0)` is `-inf`, the log of a negative
    /// number is NaN.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu, f64>::from_vec(vec![1.0, std::f64::consts::E, 0.0, -1.0], [4])?;
    /// let l = t.log()?.to_vec()?;
    /// assert_eq!(&l[..3], &[0.0, 1.0, f64::NEG_INFINITY]);
    /// assert!(l[3].is_nan());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn log(&self) -> Result<Self> {
        self.unary(UnaryOp::Log)
    }

    /// The hyperbolic tangent elementwise.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let t = Tensor::<Cuda<0>>::from_vec(vec![0.0, 50.0, -50.0], [3])?;
    /// assert_eq!(t.tanh()?.to_vec()?, vec![0.0, 1.0, -1.0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn tanh(&self) -> Result<Self> {
        self.unary(UnaryOp::Tanh)
    }

    /// The logistic function `1 / (1 + e^-x)` elementwise, stable for large `|x|`: for
    /// negative `x` it is computed as `e^x / (1 + e^x)`, so `sigmoid(-100)` is `e^-100`
    /// rather than `1 / inf`, and nothing overflows.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu, f64>::from_vec(vec![0.0, 100.0, -100.0], [3])?;
    /// let s = t.sigmoid()?.to_vec()?;
    /// assert_eq!(&s[..2], &[0.5, 1.0]);
    /// assert!(s[2] > 0.0 && s[2] < 1e-43);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn sigmoid(&self) -> Result<Self> {
        self.unary(UnaryOp::Sigmoid)
    }

    /// The exact GELU elementwise: `0.5 x (1 + erf(x / sqrt 2))`, as
    /// `torch.nn.functional.gelu` (for PyTorch's `approximate='tanh'`, see
    /// [`Tensor::gelu_tanh`]).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let g = Tensor::<Cpu>::from_vec(vec![0.0, 1.0, -1.0], [3])?.gelu()?.to_vec()?;
    /// assert_eq!(g[0], 0.0);
    /// assert!((g[1] - 0.841_344_7).abs() < 1e-6 && (g[2] + 0.158_655_25).abs() < 1e-6);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn gelu(&self) -> Result<Self> {
        self.unary(UnaryOp::Gelu)
    }

    /// The tanh approximation of GELU elementwise, PyTorch's `approximate='tanh'`:
    /// `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let g = Tensor::<Cuda<0>>::from_vec(vec![1.0, -1.0], [2])?.gelu_tanh()?.to_vec()?;
    /// assert!((g[0] - 0.841_192).abs() < 1e-6 && (g[1] + 0.158_808).abs() < 1e-6);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn gelu_tanh(&self) -> Result<Self> {
        self.unary(UnaryOp::GeluTanh)
    }
}
