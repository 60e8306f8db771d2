//! The optimizers' updates as one kernel per parameter (PyTorch's fused/`foreach`
//! AdamW and SGD): each reads the parameter, its gradient and its state once and writes
//! the parameter and the state once, in place, instead of a dozen elementwise ops with a
//! new tensor each. The CUDA C is compiled by NVRTC once per process (the path of
//! `#[locus::kernel]`); the host backend runs the same arithmetic in Rust. 16-bit types
//! compute in f32 and round once, ties to even, as the crate's other kernels do.

use crate::backend::api::user_kernel::{HostCall, KernelSource};
use crate::device::Device;
use crate::element::{DType, Element, Float};
use crate::error::{Error, Result};
use crate::kernel::KernelLaunch;
use crate::tensor::Tensor;

const SOURCE: &str = r#"
__device__ __forceinline__ float ld(const float* p, unsigned long long i) { return p[i]; }
__device__ __forceinline__ void st(float* p, unsigned long long i, float v) { p[i] = v; }
__device__ __forceinline__ double ld(const double* p, unsigned long long i) { return p[i]; }
__device__ __forceinline__ void st(double* p, unsigned long long i, double v) { p[i] = v; }
struct bf16 { unsigned short b; };
struct f16 { unsigned short b; };
__device__ __forceinline__ float ld(const bf16* p, unsigned long long i) { return __uint_as_float(((unsigned)p[i].b) << 16); }
__device__ __forceinline__ void st(bf16* p, unsigned long long i, float v) {
    unsigned u = __float_as_uint(v);
    unsigned short r = (v != v) ? (unsigned short)((u >> 16) | 0x40) : (unsigned short)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    p[i].b = r;
}
__device__ __forceinline__ float ld(const f16* p, unsigned long long i) {
    float f; unsigned short h = p[i].b; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ void st(f16* p, unsigned long long i, float v) {
    unsigned short h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(v)); p[i].b = h;
}

template <typename T, typename C>
__device__ void adamw(T* p, const T* g, T* m, T* v, C decay, C b1, C b2, C eps, C step, C bc2_sqrt, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        C gi = ld(g, i);
        C mi = b1 * ld(m, i) + (C(1) - b1) * gi;
        C vi = b2 * ld(v, i) + (C(1) - b2) * gi * gi;
        st(m, i, mi);
        st(v, i, vi);
        C pi = ld(p, i) * decay;
        st(p, i, pi - step * mi / (sqrt(vi) / bc2_sqrt + eps));
    }
}

template <typename T, typename C>
__device__ void sgd(T* p, const T* g, T* buf, C lr, C wd, C momentum, C dampening, int nesterov, int first, unsigned long long n) {
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (; i < n; i += stride) {
        C pi = ld(p, i);
        C gi = ld(g, i) + wd * pi;
        if (momentum != C(0)) {
            C b = first ? gi : momentum * ld(buf, i) + (C(1) - dampening) * gi;
            st(buf, i, b);
            gi = nesterov ? gi + momentum * b : b;
        }
        st(p, i, pi - lr * gi);
    }
}

// The same update with the per-step values (decay, step size, sqrt(1 - b2^t)) read from
// the device, so that a captured graph takes this step's values at each replay.
template <typename T, typename C>
__device__ void adamw_dev(T* p, const T* g, T* m, T* v, const double* hyper, C b1, C b2, C eps, unsigned long long n) {
    adamw<T, C>(p, g, m, v, (C)hyper[0], b1, b2, eps, (C)hyper[1], (C)hyper[2], n);
}

#define ADAMW(name, T, C) extern "C" __global__ void name(T* p, const T* g, T* m, T* v, C decay, C b1, C b2, C eps, C step, C bc2_sqrt, unsigned long long n) { adamw<T, C>(p, g, m, v, decay, b1, b2, eps, step, bc2_sqrt, n); }
#define SGD(name, T, C) extern "C" __global__ void name(T* p, const T* g, T* buf, C lr, C wd, C momentum, C dampening, int nesterov, int first, unsigned long long n) { sgd<T, C>(p, g, buf, lr, wd, momentum, dampening, nesterov, first, n); }
#define ADAMW_DEV(name, T, C) extern "C" __global__ void name(T* p, const T* g, T* m, T* v, const double* hyper, C b1, C b2, C eps, unsigned long long n) { adamw_dev<T, C>(p, g, m, v, hyper, b1, b2, eps, n); }
ADAMW_DEV(locus_adamw_dev_f32, float, float)
ADAMW_DEV(locus_adamw_dev_f64, double, double)
ADAMW_DEV(locus_adamw_dev_bf16, bf16, float)
ADAMW_DEV(locus_adamw_dev_f16, f16, float)
ADAMW(locus_adamw_f32, float, float)
ADAMW(locus_adamw_f64, double, double)
ADAMW(locus_adamw_bf16, bf16, float)
ADAMW(locus_adamw_f16, f16, float)
SGD(locus_sgd_f32, float, float)
SGD(locus_sgd_f64, double, double)
SGD(locus_sgd_bf16, bf16, float)
SGD(locus_sgd_f16, f16, float)
"#;

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
trait Compute: Copy {
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

/// The host's AdamW over one parameter, in compute type `C`.
fn adamw_host<T: Element, C: Compute + crate::backend::api::user_kernel::KernelScalar>(
    c: &mut HostCall<'_>,
) -> Result<()> {
    let [decay, b1, b2, eps, step, bc2] = [(); 6].map(|_| c.scalar::<C>().map(C::to_f64));
    let (decay, b1, b2, eps, step, bc2) = (decay?, b1?, b2?, eps?, step?, bc2?);
    let n = c.scalar::<u64>()? as usize;
    let g = c.input::<T>()?;
    let (p, m, v) = (c.output::<T>()?, c.output::<T>()?, c.output::<T>()?);
    adamw_loop::<T, C>(p, g, m, v, [decay, b1, b2, eps, step, bc2], n);
    Ok(())
}

/// [`adamw_host`] with decay, step size and `√(1 − β₂ᵗ)` read from the `hyper` input.
fn adamw_dev_host<T: Element, C: Compute + crate::backend::api::user_kernel::KernelScalar>(
    c: &mut HostCall<'_>,
) -> Result<()> {
    let [b1, b2, eps] = [(); 3].map(|_| c.scalar::<C>().map(C::to_f64));
    let (b1, b2, eps) = (b1?, b2?, eps?);
    let n = c.scalar::<u64>()? as usize;
    let g = c.input::<T>()?;
    let hyper = c.input::<f64>()?;
    let [decay, step, bc2] = match hyper {
        [d, s, b, ..] => [d, s, b].map(|x| C::from_f64(*x).to_f64()),
        _ => {
            return Err(Error::InvalidArgument {
                op: "AdamW::step",
                reason: "the step values hold fewer than 3".into(),
            })
        }
    };
    let (p, m, v) = (c.output::<T>()?, c.output::<T>()?, c.output::<T>()?);
    adamw_loop::<T, C>(p, g, m, v, [decay, b1, b2, eps, step, bc2], n);
    Ok(())
}

/// The AdamW update of the first `n` elements; `h` is decay, β₁, β₂, eps, step size and
/// `√(1 − β₂ᵗ)`, each already in the compute type.
fn adamw_loop<T: Element, C: Compute>(p: &mut [T], g: &[T], m: &mut [T], v: &mut [T], h: [f64; 6], n: usize) {
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

macro_rules! sources {
    ($($stat:ident = $name:literal, $host:expr;)*) => {$(
        static $stat: KernelSource = KernelSource::new($name, SOURCE, "inline", Some($host));
    )*};
}

sources! {
    ADAMW_F32 = "locus_adamw_f32", adamw_host::<f32, f32>;
    ADAMW_F64 = "locus_adamw_f64", adamw_host::<f64, f64>;
    ADAMW_BF16 = "locus_adamw_bf16", adamw_host::<half::bf16, f32>;
    ADAMW_F16 = "locus_adamw_f16", adamw_host::<half::f16, f32>;
    ADAMW_DEV_F32 = "locus_adamw_dev_f32", adamw_dev_host::<f32, f32>;
    ADAMW_DEV_F64 = "locus_adamw_dev_f64", adamw_dev_host::<f64, f64>;
    ADAMW_DEV_BF16 = "locus_adamw_dev_bf16", adamw_dev_host::<half::bf16, f32>;
    ADAMW_DEV_F16 = "locus_adamw_dev_f16", adamw_dev_host::<half::f16, f32>;
    SGD_F32 = "locus_sgd_f32", sgd_host::<f32, f32>;
    SGD_F64 = "locus_sgd_f64", sgd_host::<f64, f64>;
    SGD_BF16 = "locus_sgd_bf16", sgd_host::<half::bf16, f32>;
    SGD_F16 = "locus_sgd_f16", sgd_host::<half::f16, f32>;
}

fn pick(
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

fn scalar<D: Device>(l: &mut KernelLaunch<'_, D>, wide: bool, v: f64) {
    if wide {
        l.scalar(v);
    } else {
        l.scalar(v as f32);
    }
}

/// One AdamW update of `p` (gradient `g`, moments `m` and `v`), in place.
pub(crate) fn adamw<D: Device, T: Float>(
    p: &mut Tensor<D, T>,
    g: &Tensor<D, T>,
    m: &mut Tensor<D, T>,
    v: &mut Tensor<D, T>,
    s: &AdamWStep,
) -> Result<()> {
    let (k, wide) = pick("AdamW::step", T::DTYPE, &ADAMW_F32, &ADAMW_F64, &ADAMW_BF16, &ADAMW_F16)?;
    let n = p.numel() as u64;
    let mut l = KernelLaunch::<D>::new(k, 11);
    // In the C parameters' order (the host fallback takes each kind in its order).
    l.output(p);
    l.input(g);
    l.output(m);
    l.output(v);
    for x in [s.decay, s.b1, s.b2, s.eps, s.step, s.bc2_sqrt] {
        scalar(&mut l, wide, x);
    }
    l.scalar(n);
    l.launch()
}

/// [`adamw`] with the values that change each step (decay, step size, `√(1 − β₂ᵗ)`) read
/// from `hyper` on the device, as a captured graph's step needs.
pub(crate) fn adamw_dev<D: Device, T: Float>(
    p: &mut Tensor<D, T>,
    g: &Tensor<D, T>,
    m: &mut Tensor<D, T>,
    v: &mut Tensor<D, T>,
    hyper: &Tensor<D, f64>,
    s: &AdamWStep,
) -> Result<()> {
    let (k, wide) = pick("AdamW::step", T::DTYPE, &ADAMW_DEV_F32, &ADAMW_DEV_F64, &ADAMW_DEV_BF16, &ADAMW_DEV_F16)?;
    let n = p.numel() as u64;
    let mut l = KernelLaunch::<D>::new(k, 9);
    l.output(p);
    l.input(g);
    l.output(m);
    l.output(v);
    l.input(hyper);
    for x in [s.b1, s.b2, s.eps] {
        scalar(&mut l, wide, x);
    }
    l.scalar(n);
    l.launch()
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
