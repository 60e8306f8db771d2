//! Updates of many tensors per launch (PyTorch's `multi_tensor_apply`, its `foreach`
//! AdamW and `clip_grad_norm_`): up to [`SLOTS`] tensors in one kernel, so that a model of
//! 30 parameters takes one AdamW launch instead of 30 and its clipping three instead of
//! about 90. The CUDA C is update.cu's; each launch's tensors are ordered as any kernel
//! launch's are (inputs' writers waited for, outputs written in place). The host backend
//! runs the same arithmetic in Rust; host placements keep the per-tensor ops (a CUDA
//! kernel cannot run on their memory).

use super::fused::{adamw_loop, pick, scalar, AdamWStep, Compute, SOURCE};
use crate::backend::api::user_kernel::{HostCall, KernelScalar, KernelSource};
use crate::device::Device;
use crate::element::{Element, Float};
use crate::error::{Error, Result};
use crate::kernel::{Grid, KernelLaunch};
use crate::tensor::Tensor;

/// Tensors (or groups of tensors) per launch: `MULTI` in update.cu.
pub(crate) const SLOTS: usize = 32;

/// Threads per block of every multi-tensor launch (a multiple of 32, at least [`SLOTS`]).
const THREADS: u32 = 256;

/// Blocks of a launch whose largest tensor has `n` elements: one element per thread,
/// at most 1024 blocks (the rest in a grid-stride loop).
fn blocks_for(n: usize) -> u32 {
    n.div_ceil(THREADS as usize).clamp(1, 1024) as u32
}

/// One parameter's AdamW update: its values `p`, gradient `g` and moments `m`, `v`, all of
/// one shape; `p`, `m` and `v` are written in place.
pub(crate) struct AdamWSlot<D: Device, T: Float> {
    pub p: Tensor<D, T>,
    pub g: Tensor<D, T>,
    pub m: Tensor<D, T>,
    pub v: Tensor<D, T>,
}

/// Where a launch of AdamW takes the values that change each step from.
pub(crate) enum StepValues<'a, D: Device> {
    /// From the host, as arguments.
    Given,
    /// From this device tensor (decay, step size, `√(1 − β₂ᵗ)`), as a captured graph
    /// needs: each replay reads that step's values.
    OnDevice(&'a Tensor<D, f64>),
}

/// A multi-tensor launch's unused slot: four pointers and a count, all 0.
fn pad<D: Device>(l: &mut KernelLaunch<'_, D>, pointers: usize) {
    for _ in 0..pointers + 1 {
        l.scalar(0u64);
    }
}

/// AdamW over every slot of `slots`, [`SLOTS`] per launch, all at the same step (`s`).
pub(crate) fn adamw<D: Device, T: Float>(
    slots: &mut [&mut AdamWSlot<D, T>],
    from: StepValues<'_, D>,
    s: &AdamWStep,
) -> Result<()> {
    let (k, wide) = match from {
        StepValues::Given => pick("AdamW::step", T::DTYPE, &ADAMW_F32, &ADAMW_F64, &ADAMW_BF16, &ADAMW_F16)?,
        StepValues::OnDevice(_) => {
            pick("AdamW::step", T::DTYPE, &ADAMW_DEV_F32, &ADAMW_DEV_F64, &ADAMW_DEV_BF16, &ADAMW_DEV_F16)?
        }
    };
    for chunk in slots.chunks_mut(SLOTS) {
        let (largest, used) = (chunk.iter().map(|u| u.p.numel()).max().unwrap_or(0), chunk.len());
        let mut l = KernelLaunch::<D>::new(k, 7 + 5 * SLOTS);
        l.scalar(used as i32);
        match from {
            StepValues::Given => {
                for x in [s.decay, s.b1, s.b2, s.eps, s.step, s.bc2_sqrt] {
                    scalar(&mut l, wide, x);
                }
            }
            StepValues::OnDevice(hyper) => {
                l.input(hyper);
                for x in [s.b1, s.b2, s.eps] {
                    scalar(&mut l, wide, x);
                }
            }
        }
        for u in chunk.iter_mut() {
            let n = u.p.numel() as u64;
            l.output(&mut u.p);
            l.input(&u.g);
            l.output(&mut u.m);
            l.output(&mut u.v);
            l.scalar(n);
        }
        for _ in used..SLOTS {
            pad(&mut l, 4);
        }
        l.grid(Grid::new([blocks_for(largest), 1, 1], [THREADS, 1, 1])).launch()?;
    }
    Ok(())
}

/// Blocks of each launch of [`sum_squares`] over tensors of `total` elements in all: the
/// same for every launch, so that the partial sums have fixed places.
fn sum_blocks(total: usize) -> u32 {
    total.div_ceil(4 * THREADS as usize).clamp(1, 256) as u32
}

/// `‖g‖` over every tensor of `grads` together, and `min(1, max_norm / (‖g‖ + 1e-6))`, both
/// 0-d on the tensors' device, in two phases: each block of each launch sums the squares
/// of its share into a partial sum (f64), then one block adds the partial sums in a fixed
/// order. `grads` must not be empty.
pub(crate) fn norm_and_coef<D: Device, T: Float>(
    grads: &[Tensor<D, T>],
    max_norm: f64,
) -> Result<(Tensor<D, T>, Tensor<D, T>)> {
    let first = grads.first().ok_or_else(|| Error::InvalidArgument {
        op: "clip_grad_norm",
        reason: "no gradient to take the norm of".into(),
    })?;
    let at = first.placement();
    let (sq, wide) = pick("clip_grad_norm", T::DTYPE, &SUMSQ_F32, &SUMSQ_F64, &SUMSQ_BF16, &SUMSQ_F16)?;
    let blocks = sum_blocks(grads.iter().map(|g| g.numel()).sum());
    let launches = grads.len().div_ceil(SLOTS);
    let mut partials = Tensor::<D, f64>::zeros_on(at, [launches * blocks as usize])?;
    for (c, chunk) in grads.chunks(SLOTS).enumerate() {
        let mut l = KernelLaunch::<D>::new(sq, 4 + 2 * SLOTS);
        l.scalar(chunk.len() as i32);
        l.scalar((c * blocks as usize) as u64);
        l.scalar(blocks as u64);
        l.output(&mut partials);
        for g in chunk {
            l.input(g);
            l.scalar(g.numel() as u64);
        }
        for _ in chunk.len()..SLOTS {
            pad(&mut l, 1);
        }
        l.grid(Grid::new([blocks, 1, 1], [THREADS, 1, 1])).launch()?;
    }
    let (fin, _) = pick("clip_grad_norm", T::DTYPE, &COEF_F32, &COEF_F64, &COEF_BF16, &COEF_F16)?;
    let mut norm = Tensor::<D, T>::zeros_on(at, [])?;
    let mut coef = Tensor::<D, T>::zeros_on(at, [])?;
    let mut l = KernelLaunch::<D>::new(fin, 5);
    let len = partials.numel() as u64;
    l.input(&partials);
    l.scalar(len);
    scalar(&mut l, wide, max_norm);
    l.output(&mut norm);
    l.output(&mut coef);
    l.grid(Grid::new([1, 1, 1], [THREADS, 1, 1])).launch()?;
    Ok((norm, coef))
}

/// Every element of every tensor of `grads` times `coef` (0-d), in place.
pub(crate) fn scale<D: Device, T: Float>(grads: &mut [Tensor<D, T>], coef: &Tensor<D, T>) -> Result<()> {
    let (k, _) = pick("clip_grad_norm", T::DTYPE, &SCALE_F32, &SCALE_F64, &SCALE_BF16, &SCALE_F16)?;
    for chunk in grads.chunks_mut(SLOTS) {
        let (largest, used) = (chunk.iter().map(|g| g.numel()).max().unwrap_or(0), chunk.len());
        let mut l = KernelLaunch::<D>::new(k, 2 + 2 * SLOTS);
        l.scalar(used as i32);
        l.input(coef);
        for g in chunk.iter_mut() {
            let n = g.numel() as u64;
            l.output(g);
            l.scalar(n);
        }
        for _ in used..SLOTS {
            pad(&mut l, 1);
        }
        l.grid(Grid::new([blocks_for(largest), 1, 1], [THREADS, 1, 1])).launch()?;
    }
    Ok(())
}

// ---- The host backend's fallbacks: the same arguments, taken in parameter order ----

/// The slot count of a launch, checked against [`SLOTS`].
fn count(c: &mut HostCall<'_>) -> Result<usize> {
    let n = c.scalar::<i32>()?;
    usize::try_from(n).ok().filter(|n| *n <= SLOTS).ok_or_else(|| Error::InvalidArgument {
        op: "multi-tensor update",
        reason: format!("{n} slots in a launch of at most {SLOTS}"),
    })
}

fn adamw_host<T: Element, C: Compute + KernelScalar>(c: &mut HostCall<'_>) -> Result<()> {
    let slots = count(c)?;
    let mut h = [0.0; 6];
    for x in &mut h {
        *x = c.scalar::<C>()?.to_f64();
    }
    adamw_slots::<T, C>(c, slots, h)
}

fn adamw_dev_host<T: Element, C: Compute + KernelScalar>(c: &mut HostCall<'_>) -> Result<()> {
    let slots = count(c)?;
    let hyper = c.input::<f64>()?;
    let [b1, b2, eps] = [(); 3].map(|_| c.scalar::<C>().map(C::to_f64));
    let Some(&[decay, step, bc2, ..]) = hyper.get(..3) else {
        return Err(Error::InvalidArgument { op: "AdamW::step", reason: "the step values hold fewer than 3".into() });
    };
    let round = |x: f64| C::from_f64(x).to_f64();
    adamw_slots::<T, C>(c, slots, [round(decay), b1?, b2?, eps?, round(step), round(bc2)])
}

/// The slots of an AdamW launch, each updated by the one-tensor loop.
fn adamw_slots<T: Element, C: Compute>(c: &mut HostCall<'_>, slots: usize, h: [f64; 6]) -> Result<()> {
    for _ in 0..slots {
        let (p, g, m, v) = (c.output::<T>()?, c.input::<T>()?, c.output::<T>()?, c.output::<T>()?);
        let n = c.scalar::<u64>()? as usize;
        adamw_loop::<T, C>(p, g, m, v, h, n);
    }
    Ok(())
}

fn sumsq_host<T: Element>(c: &mut HostCall<'_>) -> Result<()> {
    let slots = count(c)?;
    let (base, blocks) = (c.scalar::<u64>()? as usize, c.scalar::<u64>()? as usize);
    let partials = c.output::<f64>()?;
    let mut total = 0.0;
    for _ in 0..slots {
        let g = c.input::<T>()?;
        let n = c.scalar::<u64>()? as usize;
        total += g.iter().take(n).map(|x| x.to_f64() * x.to_f64()).sum::<f64>();
    }
    // One sum where the GPU's blocks leave theirs; the other places hold 0.
    let len = partials.len();
    let mine = partials.get_mut(base..base + blocks).ok_or_else(|| Error::InvalidArgument {
        op: "clip_grad_norm",
        reason: format!("partial sums {base}..{} of {len}", base + blocks),
    })?;
    mine.fill(0.0);
    if let Some(p) = mine.first_mut() {
        *p = total;
    }
    Ok(())
}

fn coef_host<T: Element, C: Compute + KernelScalar>(c: &mut HostCall<'_>) -> Result<()> {
    let partials = c.input::<f64>()?;
    let len = c.scalar::<u64>()? as usize;
    let max_norm = c.scalar::<C>()?.to_f64();
    let (norm, coef) = (c.output::<T>()?, c.output::<T>()?);
    let round = |x: f64| T::from_f64(C::from_f64(x).to_f64()).to_f64();
    let sum: f64 = partials.iter().take(len).sum();
    let nrm = round(round(sum).sqrt());
    let k = round(max_norm / round(nrm + 1e-6));
    // NaN stays NaN, as the kernel's comparisons leave it.
    let k = k.clamp(0.0, 1.0);
    if let (Some(n), Some(q)) = (norm.first_mut(), coef.first_mut()) {
        *n = T::from_f64(nrm);
        *q = T::from_f64(k);
    }
    Ok(())
}

fn scale_host<T: Element, C: Compute>(c: &mut HostCall<'_>) -> Result<()> {
    let slots = count(c)?;
    let k = c.input::<T>()?.first().map_or(0.0, |k| k.to_f64());
    for _ in 0..slots {
        let g = c.output::<T>()?;
        let n = c.scalar::<u64>()? as usize;
        for x in g.iter_mut().take(n) {
            *x = T::from_f64(C::from_f64(x.to_f64() * k).to_f64());
        }
    }
    Ok(())
}

sources! {
    ADAMW_F32 = "locus_adamw_multi_f32", adamw_host::<f32, f32>;
    ADAMW_F64 = "locus_adamw_multi_f64", adamw_host::<f64, f64>;
    ADAMW_BF16 = "locus_adamw_multi_bf16", adamw_host::<half::bf16, f32>;
    ADAMW_F16 = "locus_adamw_multi_f16", adamw_host::<half::f16, f32>;
    ADAMW_DEV_F32 = "locus_adamw_multi_dev_f32", adamw_dev_host::<f32, f32>;
    ADAMW_DEV_F64 = "locus_adamw_multi_dev_f64", adamw_dev_host::<f64, f64>;
    ADAMW_DEV_BF16 = "locus_adamw_multi_dev_bf16", adamw_dev_host::<half::bf16, f32>;
    ADAMW_DEV_F16 = "locus_adamw_multi_dev_f16", adamw_dev_host::<half::f16, f32>;
    SUMSQ_F32 = "locus_sumsq_multi_f32", sumsq_host::<f32>;
    SUMSQ_F64 = "locus_sumsq_multi_f64", sumsq_host::<f64>;
    SUMSQ_BF16 = "locus_sumsq_multi_bf16", sumsq_host::<half::bf16>;
    SUMSQ_F16 = "locus_sumsq_multi_f16", sumsq_host::<half::f16>;
    COEF_F32 = "locus_clip_coef_f32", coef_host::<f32, f32>;
    COEF_F64 = "locus_clip_coef_f64", coef_host::<f64, f64>;
    COEF_BF16 = "locus_clip_coef_bf16", coef_host::<half::bf16, f32>;
    COEF_F16 = "locus_clip_coef_f16", coef_host::<half::f16, f32>;
    SCALE_F32 = "locus_scale_multi_f32", scale_host::<f32, f32>;
    SCALE_F64 = "locus_scale_multi_f64", scale_host::<f64, f64>;
    SCALE_BF16 = "locus_scale_multi_bf16", scale_host::<half::bf16, f32>;
    SCALE_F16 = "locus_scale_multi_f16", scale_host::<half::f16, f32>;
}
