//! SGD as one kernel per parameter, and what the multi-tensor AdamW of `multi` shares
//! (its step values, kernel choice, the host's element loop): each reads the parameter,
//! its gradient and its state once and writes the parameter and the state once, in
//! place, instead of a dozen elementwise ops with a new tensor each. The CUDA C
//! (update.cu) is compiled by NVRTC once per process (the path of `#[locus::kernel]`);
//! the host backend runs the same arithmetic in Rust. 16-bit types compute in f32 and
//! round once, ties to even, as the crate's other kernels do. Parameters in host memory
//! take the same updates as tensor ops (`adamw_by_ops`, `sgd_by_ops`).

use crate::backend::api::user_kernel::{HostCall, KernelSource};
use crate::device::Device;
use crate::element::{DType, Element, Float};
use crate::error::{Error, Result};
use crate::kernel::KernelLaunch;
use crate::tensor::Tensor;

/// The CUDA C of every update (one tensor per launch here, many in `multi`).
pub(super) const SOURCE: &str = include_str!("update.cu");

/// The hyper-parameters of one AdamW update, folded for the kernel.
pub(crate) struct AdamWStep {
    /// `1 − lr · weight_decay`.
    pub decay: f64,
    pub b1: f64,
    pub b2: f64,
    pub eps: f64,
    /// `lr / (1 − β₁ᵗ)`.
    pub step: f64,
    /// `√(1 − β₂ᵗ)`.
    pub bc2_sqrt: f64,
}

/// The hyper-parameters of one SGD update.
pub(crate) struct SgdStep {
    pub lr: f64,
    pub weight_decay: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub nesterov: bool,
    /// The momentum buffer is set to the gradient (its first step).
    pub first: bool,
}

/// A value of `T`'s compute type (f64 for f64, f32 otherwise) from an f64.
pub(super) trait Compute: Copy {
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
}
impl Compute for f32 {
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}
impl Compute for f64 {
    fn from_f64(v: f64) -> Self {
        v
    }
    fn to_f64(self) -> f64 {
        self
    }
}

/// The AdamW update of the first `n` elements; `h` is decay, β₁, β₂, eps, step size and
/// `√(1 − β₂ᵗ)`, each already in the compute type.
pub(super) fn adamw_loop<T: Element, C: Compute>(
    p: &mut [T],
    g: &[T],
    m: &mut [T],
    v: &mut [T],
    h: [f64; 6],
    n: usize,
) {
    let [decay, b1, b2, eps, step, bc2] = h;
    let round = |x: f64| T::from_f64(C::from_f64(x).to_f64());
    for i in 0..n.min(p.len()) {
        let gi = C::from_f64(g[i].to_f64()).to_f64();
        let mi = C::from_f64(b1 * m[i].to_f64() + (1.0 - b1) * gi).to_f64();
        let vi = C::from_f64(b2 * v[i].to_f64() + (1.0 - b2) * gi * gi).to_f64();
        m[i] = round(mi);
        v[i] = round(vi);
        let pi = p[i].to_f64() * decay;
        p[i] = round(pi - step * mi / (vi.sqrt() / bc2 + eps));
    }
}

fn sgd_host<T: Element, C: Compute + crate::backend::api::user_kernel::KernelScalar>(
    c: &mut HostCall<'_>,
) -> Result<()> {
    let [lr, wd, momentum, dampening] = [(); 4].map(|_| c.scalar::<C>().map(C::to_f64));
    let (lr, wd, momentum, dampening) = (lr?, wd?, momentum?, dampening?);
    let (nesterov, first) = (c.scalar::<i32>()? != 0, c.scalar::<i32>()? != 0);
    let n = c.scalar::<u64>()? as usize;
    let g = c.input::<T>()?;
    let (p, buf) = (c.output::<T>()?, c.output::<T>()?);
    let round = |x: f64| T::from_f64(C::from_f64(x).to_f64());
    for i in 0..n.min(p.len()) {
        let pi = p[i].to_f64();
        let mut gi = C::from_f64(g[i].to_f64() + wd * pi).to_f64();
        if momentum != 0.0 {
            let b = if first { gi } else { C::from_f64(momentum * buf[i].to_f64() + (1.0 - dampening) * gi).to_f64() };
            buf[i] = round(b);
            gi = if nesterov { C::from_f64(gi + momentum * b).to_f64() } else { b };
        }
        p[i] = round(pi - lr * gi);
    }
    Ok(())
}

sources! {
    SGD_F32 = "locus_sgd_f32", sgd_host::<f32, f32>;
    SGD_F64 = "locus_sgd_f64", sgd_host::<f64, f64>;
    SGD_BF16 = "locus_sgd_bf16", sgd_host::<half::bf16, f32>;
    SGD_F16 = "locus_sgd_f16", sgd_host::<half::f16, f32>;
}

pub(super) fn pick(
    op: &'static str,
    dtype: DType,
    f32k: &'static KernelSource,
    f64k: &'static KernelSource,
    bf: &'static KernelSource,
    f16k: &'static KernelSource,
) -> Result<(&'static KernelSource, bool)> {
    match dtype {
        DType::F32 => Ok((f32k, false)),
        DType::F64 => Ok((f64k, true)),
        DType::BF16 => Ok((bf, false)),
        DType::F16 => Ok((f16k, false)),
        other => Err(Error::InvalidArgument { op, reason: format!("no update for {other} parameters") }),
    }
}

pub(super) fn scalar<D: Device>(l: &mut KernelLaunch<'_, D>, wide: bool, v: f64) {
    if wide {
        l.scalar(v);
    } else {
        l.scalar(v as f32);
    }
}

/// One SGD update of `p` (gradient `g`, momentum buffer `buf`), in place.
pub(crate) fn sgd<D: Device, T: Float>(
    p: &mut Tensor<D, T>,
    g: &Tensor<D, T>,
    buf: &mut Tensor<D, T>,
    s: &SgdStep,
) -> Result<()> {
    let (k, wide) = pick("Sgd::step", T::DTYPE, &SGD_F32, &SGD_F64, &SGD_BF16, &SGD_F16)?;
    let n = p.numel() as u64;
    let mut l = KernelLaunch::<D>::new(k, 10);
    l.output(p);
    l.input(g);
    l.output(buf);
    for x in [s.lr, s.weight_decay, s.momentum, s.dampening] {
        scalar(&mut l, wide, x);
    }
    l.scalar(s.nesterov as i32);
    l.scalar(s.first as i32);
    l.scalar(n);
    l.launch()
}

/// A parameter with its two moments.
type Moments<D, T> = (Tensor<D, T>, Tensor<D, T>, Tensor<D, T>);

/// The AdamW update as tensor ops, for parameters in host memory (a CUDA kernel cannot
/// run there): the new parameter, `m` and `v`.
pub(crate) fn adamw_by_ops<D: Device, T: Float>(
    p: &Tensor<D, T>,
    g: &Tensor<D, T>,
    m: &Tensor<D, T>,
    v: &Tensor<D, T>,
    s: &AdamWStep,
) -> Result<Moments<D, T>> {
    let m = (&m.scaled(s.b1)? + &g.scaled(1.0 - s.b1)?)?;
    let v = (&v.scaled(s.b2)? + &g.square()?.scaled(1.0 - s.b2)?)?;
    let denom = v.sqrt()?.scaled(1.0 / s.bc2_sqrt)?.shifted(s.eps)?;
    let p = (&p.scaled(s.decay)? - &(&m / &denom)?.scaled(s.step)?)?;
    Ok((p, m, v))
}

/// The SGD update as tensor ops, for parameters in host memory: the new parameter and
/// momentum buffer.
pub(crate) fn sgd_by_ops<D: Device, T: Float>(
    p: &Tensor<D, T>,
    g: &Tensor<D, T>,
    buf: &Tensor<D, T>,
    s: &SgdStep,
) -> Result<(Tensor<D, T>, Tensor<D, T>)> {
    let mut g = if s.weight_decay != 0.0 { (g + &p.scaled(s.weight_decay)?)? } else { g.clone() };
    let mut buf = buf.clone();
    if s.momentum != 0.0 {
        buf = if s.first { g.clone() } else { (&buf.scaled(s.momentum)? + &g.scaled(1.0 - s.dampening)?)? };
        g = if s.nesterov { (&g + &buf.scaled(s.momentum)?)? } else { buf.clone() };
    }
    Ok(((p - &g.scaled(s.lr)?)?, buf))
}
