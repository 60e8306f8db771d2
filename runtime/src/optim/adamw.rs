//! AdamW: Adam with decoupled weight decay (PyTorch's `torch.optim.AdamW`, the same
//! update, bias correction included).

use std::path::Path;

use super::fused::{self, AdamWStep};
use super::multi::{self, AdamWSlot, StepValues};
use super::state::State;
use crate::autograd::{no_grad, Param};
use crate::checkpoint::Checkpoint;
use crate::device::{Device, DeviceId};
use crate::element::Float;
use crate::error::{Error, Result};
use crate::nn::Parameters;
use crate::tensor::Tensor;
use crate::to_device::ToDevice;

/// AdamW on placement `D`: for each parameter with a gradient `g`, at its step `t`:
/// `p *= 1 − lr · weight_decay`, `m = β₁ m + (1 − β₁) g`, `v = β₂ v + (1 − β₂) g²`,
/// `p -= lr / (1 − β₁ᵗ) · m / (√v / √(1 − β₂ᵗ) + eps)`. Defaults as PyTorch's: betas
/// (0.9, 0.999), eps 1e-8, weight decay 0.01. The moments live on `D`.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::nn::{self, Linear, Module};
/// use locus::optim::AdamW;
/// use locus::{Cuda, Tensor};
/// let mut layer = Linear::<Cuda<0>>::new(2, 1, 0)?;
/// let mut opt = AdamW::new(0.05);
/// let x = Tensor::<Cuda<0>>::ones([4, 2])?;
/// for _ in 0..50 {
///     nn::zero_grad(&layer);
///     layer.forward(&x)?.square()?.mean()?.backward()?;
///     opt.step(&mut layer)?;
/// }
/// assert!(layer.forward(&x)?.square()?.mean()?.item()? < 1e-2);
/// # Ok::<(), locus::Error>(())
/// ```
pub struct AdamW<D: Device, T: Float = f32> {
    lr: f64,
    betas: (f64, f64),
    eps: f64,
    weight_decay: f64,
    state: State<D, T>,
}

impl<D: Device, T: Float> AdamW<D, T> {
    /// AdamW with learning rate `lr` and PyTorch's other defaults.
    pub fn new(lr: f64) -> Self {
        AdamW { lr, betas: (0.9, 0.999), eps: 1e-8, weight_decay: 0.01, state: State::default() }
    }

    /// With other betas.
    pub fn betas(mut self, b1: f64, b2: f64) -> Self {
        self.betas = (b1, b2);
        self
    }

    /// With another eps.
    pub fn eps(mut self, eps: f64) -> Self {
        self.eps = eps;
        self
    }

    /// With another (decoupled) weight decay.
    pub fn weight_decay(mut self, weight_decay: f64) -> Self {
        self.weight_decay = weight_decay;
        self
    }

    /// The learning rate.
    pub fn lr(&self) -> f64 {
        self.lr
    }

    /// Sets the learning rate (a schedule's step).
    pub fn set_lr(&mut self, lr: f64) {
        self.lr = lr;
    }

    /// The number of steps taken for parameter `name` (0 before its first).
    pub fn steps_of(&self, name: &str) -> u64 {
        self.state.steps.get(name).copied().unwrap_or(0)
    }

    /// The kernel's values for step `t` (from 1) at the current learning rate.
    pub(crate) fn step_values(&self, t: u64) -> AdamWStep {
        let (b1, b2) = self.betas;
        let t = i32::try_from(t).unwrap_or(i32::MAX);
        let (bc1, bc2) = (1.0 - b1.powi(t), 1.0 - b2.powi(t));
        AdamWStep {
            decay: 1.0 - self.lr * self.weight_decay,
            b1,
            b2,
            eps: self.eps,
            step: self.lr / bc1,
            bc2_sqrt: bc2.sqrt(),
        }
    }

    /// One update of every parameter of `model` that has a gradient, in place, with no
    /// wait for the device: on a CUDA device one kernel for up to 32 parameters (PyTorch's
    /// `foreach`/fused AdamW), in host memory the update as tensor ops.
    pub fn step(&mut self, model: &mut impl Parameters<D, T>) -> Result<()> {
        let _off = no_grad();
        let mut batch = self.take_batch(model, false, |opt, name, p, g, t| {
            let at = p.placement();
            let shape = p.shape().to_vec();
            let m = opt.state.slot(name, "exp_avg", || Tensor::zeros_on(at, &shape))?.clone();
            let v = opt.state.slot(name, "exp_avg_sq", || Tensor::zeros_on(at, &shape))?.clone();
            let (np, nm, nv) = fused::adamw_by_ops(&p.detach(), &g, &m, &v, &opt.step_values(t))?;
            p.set(np)?;
            let keys = opt.state.slots.entry(name.to_string()).or_default();
            keys.insert("exp_avg", nm);
            keys.insert("exp_avg_sq", nv);
            opt.state.steps.insert(name.to_string(), t);
            Ok(())
        })?;
        let launched = self.launch_by_step(&mut batch);
        self.put_back(model, batch, true)?;
        launched
    }

    /// The parameters of `model` with a gradient, moved out with their moments for one
    /// launch over all of them (pass 1 of a step; [`put_back`](Self::put_back) is pass 2).
    /// Each taken parameter holds its gradient in the meantime; parameters in host
    /// memory (a CUDA kernel cannot run there) go to `by_ops` instead, unless `graphed`.
    /// On an `Err` everything taken so far is put back and the `Err` comes back.
    fn take_batch(
        &mut self,
        model: &mut impl Parameters<D, T>,
        graphed: bool,
        mut by_ops: impl FnMut(&mut Self, &str, &mut Param<D, T>, Tensor<D, T>, u64) -> Result<()>,
    ) -> Result<Vec<Pending<D, T>>> {
        let mut batch = Vec::new();
        let mut result = Ok(());
        model.visit_params_mut("", &mut |name, p| {
            let Some(g) = p.grad().filter(|_| result.is_ok()) else { return };
            let t = self.steps_of(name) + 1;
            if !graphed && !matches!(p.placement().id(), DeviceId::Cuda(_)) {
                result = by_ops(self, name, p, g, t);
                return;
            }
            // An eager step makes missing moments (zeros); a graphed one was prepared.
            if !graphed {
                let (at, shape) = (p.placement(), p.shape().to_vec());
                let made = ["exp_avg", "exp_avg_sq"]
                    .into_iter()
                    .try_for_each(|key| self.state.slot(name, key, || Tensor::zeros_on(at, &shape)).map(drop));
                if let Err(e) = made {
                    result = Err(e);
                    return;
                }
            }
            let moments =
                self.state.slots.get_mut(name).and_then(|k| Some((k.remove("exp_avg")?, k.remove("exp_avg_sq")?)));
            let Some((m, v)) = moments else {
                result = Err(missing_moments(name));
                return;
            };
            // The values leave the parameter (the gradient, of the same shape, holds their
            // place), so the kernel writes them in place: they are not shared.
            let values = p.take_values("AdamW::step", g.clone());
            batch.push(Pending { name: name.to_string(), t, done: false, slot: AdamWSlot { p: values, g, m, v } });
        });
        match result {
            Ok(()) => Ok(batch),
            Err(e) => {
                self.put_back(model, batch, false)?;
                Err(e)
            }
        }
    }

    /// One launch group per step count (the bias corrections differ), each group's
    /// parameters marked done once their launches are queued.
    fn launch_by_step(&self, batch: &mut [Pending<D, T>]) -> Result<()> {
        let mut steps: Vec<u64> = batch.iter().map(|b| b.t).collect();
        steps.sort_unstable();
        steps.dedup();
        for t in steps {
            let mut group: Vec<&mut AdamWSlot<D, T>> =
                batch.iter_mut().filter(|b| b.t == t).map(|b| &mut b.slot).collect();
            multi::adamw(&mut group, StepValues::Given, &self.step_values(t))?;
            batch.iter_mut().filter(|b| b.t == t).for_each(|b| b.done = true);
        }
        Ok(())
    }

    /// Pass 2: every taken parameter's values back in place and its moments in the state,
    /// found by name (the first taken of that name, so a model that lists a name twice gets
    /// each back in its order); with `count`, the step of each one done. A taken parameter
    /// the second visit did not list again (a `Parameters` impl whose list changed between
    /// two visits) is an `Err` naming it: it holds its gradient in place of its values.
    fn put_back(
        &mut self,
        model: &mut impl Parameters<D, T>,
        mut batch: Vec<Pending<D, T>>,
        count: bool,
    ) -> Result<()> {
        model.visit_params_mut("", &mut |name, p| {
            let Some(at) = batch.iter().position(|b| b.name == name) else { return };
            let b = batch.remove(at);
            p.put_values(b.slot.p);
            let keys = self.state.slots.entry(b.name.clone()).or_default();
            keys.insert("exp_avg", b.slot.m);
            keys.insert("exp_avg_sq", b.slot.v);
            if count && b.done {
                self.state.steps.insert(b.name, b.t);
            }
        });
        match batch.first() {
            None => Ok(()),
            Some(b) => Err(Error::InvalidArgument {
                op: "AdamW::step",
                reason: format!(
                    "the model listed `{}` when the step took its values but not when it gave them back; \
                     its `Parameters` impl must visit the same parameters each time",
                    b.name
                ),
            }),
        }
    }

    /// Before a graph captures steps of `model`: every parameter's moments made (zeros
    /// before its first step) in memory of their own.
    pub(crate) fn prepare_graphed(&mut self, model: &impl Parameters<D, T>) -> Result<()> {
        let mut result = Ok(());
        model.visit_params("", &mut |name, p| {
            let (at, shape) = (p.placement(), p.shape().to_vec());
            for key in ["exp_avg", "exp_avg_sq"] {
                if result.is_ok() {
                    result = self.state.slot(name, key, || Tensor::zeros_on(at, &shape)).and_then(|m| m.own_memory());
                }
            }
        });
        result
    }

    /// The step count the parameters `names` share, which a graphed step goes on from: an
    /// `Err` if they differ (a graphed step updates each of them every time).
    pub(crate) fn common_steps(&self, names: &[String]) -> Result<u64> {
        let Some(first) = names.first() else { return Ok(0) };
        let t = self.steps_of(first);
        match names.iter().find(|n| self.steps_of(n) != t) {
            None => Ok(t),
            Some(other) => Err(Error::InvalidArgument {
                op: "GraphedStep::capture",
                reason: format!(
                    "AdamW took {t} steps of `{first}` but {} of `{other}`; a graphed step updates every parameter \
                     with a gradient each time, so they must start from one count (capture before the first step, or \
                     after steps in which each of them had a gradient)",
                    self.steps_of(other)
                ),
            }),
        }
    }

    /// Every moment tensor, which a graphed step writes in place.
    pub(crate) fn state_tensors(&self) -> impl Iterator<Item = &Tensor<D, T>> {
        self.state.slots.values().flat_map(|keys| keys.values())
    }

    /// The update of [`step`](Self::step) with the per-step values read from `hyper` on the
    /// device (decay, step size, `√(1 − β₂ᵗ)`), as a graph captures it; the moments must
    /// exist ([`prepare_graphed`](Self::prepare_graphed)). Step counts are not changed here;
    /// the names of the parameters it updates (those with a gradient) come back, for
    /// [`set_steps`](Self::set_steps) after each replay.
    pub(crate) fn step_graphed(
        &mut self,
        model: &mut impl Parameters<D, T>,
        hyper: &Tensor<D, f64>,
    ) -> Result<Vec<String>> {
        let _off = no_grad();
        let mut batch = self.take_batch(model, true, |_, _, _, _, _| Ok(()))?;
        // Only β₁, β₂ and eps are read from these; the rest come from `hyper`.
        let s = self.step_values(1);
        let mut slots: Vec<&mut AdamWSlot<D, T>> = batch.iter_mut().map(|b| &mut b.slot).collect();
        let launched = multi::adamw(&mut slots, StepValues::OnDevice(hyper), &s);
        let stepped = batch.iter().map(|b| b.name.clone()).collect();
        self.put_back(model, batch, false)?;
        launched.map(|()| stepped)
    }

    /// Sets the step count of each parameter `names` lists to `t` (after a graphed step's
    /// replay, for the parameters it updates).
    pub(crate) fn set_steps(&mut self, names: &[String], t: u64) {
        for name in names {
            self.state.steps.insert(name.clone(), t);
        }
    }

    /// Saves the moments and step counts by parameter name.
    pub fn save_state(&self, path: impl AsRef<Path>) -> Result<()> {
        self.state.save(path)
    }

    /// Loads state saved by [`save_state`](Self::save_state), onto this optimizer's
    /// placement (load the file with `load_safetensors::<D>`).
    pub fn load_state(&mut self, checkpoint: &Checkpoint<D>) -> Result<()> {
        self.state.load(checkpoint, &["exp_avg", "exp_avg_sq"])
    }
}

/// A parameter taken out for a launch: its name, the step it takes, whether its launch
/// was queued, its tensors.
struct Pending<D: Device, T: Float> {
    name: String,
    t: u64,
    done: bool,
    slot: AdamWSlot<D, T>,
}

fn missing_moments(name: &str) -> Error {
    Error::InvalidArgument {
        op: "AdamW::step",
        reason: format!("`{name}` has no moments: the graphed step was captured for another model"),
    }
}

impl<D: Device, T: Float> ToDevice for AdamW<D, T> {
    type On<E: Device> = AdamW<E, T>;
    fn to_placement<E: Device>(&self, placement: E) -> Result<AdamW<E, T>> {
        Ok(AdamW {
            lr: self.lr,
            betas: self.betas,
            eps: self.eps,
            weight_decay: self.weight_decay,
            state: self.state.to_placement(placement)?,
        })
    }
}
