//! AdamW: Adam with decoupled weight decay (PyTorch's `torch.optim.AdamW`, the same
//! update, bias correction included).

use std::path::Path;

use super::state::State;
use crate::autograd::no_grad;
use crate::checkpoint::Checkpoint;
use crate::device::Device;
use crate::element::Float;
use crate::error::Result;
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
    pub fn steps_of(&self, name: &str) -> Result<u64> {
        Ok(match self.state.get(name, "step") {
            Some(t) => t.item()?.to_f64() as u64,
            None => 0,
        })
    }

    /// One update of every parameter of `model` that has a gradient.
    pub fn step(&mut self, model: &mut impl Parameters<D, T>) -> Result<()> {
        let _off = no_grad();
        let (b1, b2) = self.betas;
        let mut result = Ok(());
        model.visit_params_mut("", &mut |name, p| {
            if result.is_err() {
                return;
            }
            let Some(g) = p.grad() else { return };
            result = (|| {
                let t = self.steps_of(name)? + 1;
                let (m, v) = match (self.state.get(name, "exp_avg"), self.state.get(name, "exp_avg_sq")) {
                    (Some(m), Some(v)) => (m.clone(), v.clone()),
                    _ => (Tensor::zeros_on(p.placement(), p.shape())?, Tensor::zeros_on(p.placement(), p.shape())?),
                };
                let m = (&m.scaled(b1)? + &g.scaled(1.0 - b1)?)?;
                let v = (&v.scaled(b2)? + &g.square()?.scaled(1.0 - b2)?)?;
                let (bc1, bc2) = (1.0 - b1.powi(t as i32), 1.0 - b2.powi(t as i32));
                let denom = v.sqrt()?.scaled(1.0 / bc2.sqrt())?.shifted(self.eps)?;
                let update = (&m / &denom)?.scaled(self.lr / bc1)?;
                let decayed = p.detach().scaled(1.0 - self.lr * self.weight_decay)?;
                p.set((&decayed - &update)?)?;
                self.state.set(name, "exp_avg", m);
                self.state.set(name, "exp_avg_sq", v);
                self.state.set(name, "step", Tensor::full_on(p.placement(), [], T::from_f64(t as f64))?);
                Ok(())
            })();
        });
        result
    }

    /// Saves the moments and step counts by parameter name.
    pub fn save_state(&self, path: impl AsRef<Path>) -> Result<()> {
        self.state.save(path)
    }

    /// Loads state saved by [`save_state`](Self::save_state), onto this optimizer's
    /// placement (load the file with `load_safetensors::<D>`).
    pub fn load_state(&mut self, checkpoint: &Checkpoint<D>) -> Result<()> {
        self.state.load(checkpoint, &["exp_avg", "exp_avg_sq", "step"])
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
