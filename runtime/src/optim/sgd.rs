//! Stochastic gradient descent with momentum, Nesterov momentum and weight decay
//! (PyTorch's `torch.optim.SGD`, the same update).

use std::path::Path;

use super::fused::{self, SgdStep};
use super::state::{each_gradient, State};
use crate::autograd::no_grad;
use crate::checkpoint::Checkpoint;
use crate::device::{Device, DeviceId};
use crate::element::Float;
use crate::error::{Error, Result};
use crate::nn::Parameters;
use crate::tensor::Tensor;
use crate::to_device::ToDevice;

/// SGD on placement `D`: for each parameter with a gradient `g`,
/// `g += weight_decay · p`; with momentum `b = momentum · b + (1 − dampening) · g` (the
/// first step `b = g`) and `g = g + momentum · b` (Nesterov) or `g = b`; then
/// `p -= lr · g`. Parameters without a gradient are left alone.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::nn::{Linear, Module};
/// use locus::optim::Sgd;
/// use locus::{Cuda, Tensor};
/// let mut layer = Linear::<Cuda<0>>::new(2, 1, 0)?;
/// let mut opt = Sgd::new(0.1).momentum(0.9);
/// let x = Tensor::<Cuda<0>>::ones([4, 2])?;
/// let before = layer.forward(&x)?.square()?.mean()?.item()?;
/// for _ in 0..20 {
///     locus::nn::zero_grad(&layer);
///     layer.forward(&x)?.square()?.mean()?.backward()?;
///     opt.step(&mut layer)?;
/// }
/// assert!(layer.forward(&x)?.square()?.mean()?.item()? < before / 10.0);
/// # Ok::<(), locus::Error>(())
/// ```
pub struct Sgd<D: Device, T: Float = f32> {
    lr: f64,
    momentum: f64,
    dampening: f64,
    nesterov: bool,
    weight_decay: f64,
    state: State<D, T>,
}

impl<D: Device, T: Float> Sgd<D, T> {
    /// Plain SGD with learning rate `lr`.
    pub fn new(lr: f64) -> Self {
        Sgd { lr, momentum: 0.0, dampening: 0.0, nesterov: false, weight_decay: 0.0, state: State::default() }
    }

    /// With momentum.
    pub fn momentum(mut self, momentum: f64) -> Self {
        self.momentum = momentum;
        self
    }

    /// With dampening of the momentum.
    pub fn dampening(mut self, dampening: f64) -> Self {
        self.dampening = dampening;
        self
    }

    /// With Nesterov momentum (needs momentum > 0 and no dampening, checked at `step`).
    pub fn nesterov(mut self, on: bool) -> Self {
        self.nesterov = on;
        self
    }

    /// With (L2) weight decay added to the gradient.
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

    /// One update of every parameter of `model` that has a gradient.
    pub fn step(&mut self, model: &mut impl Parameters<D, T>) -> Result<()> {
        if self.nesterov && (self.momentum <= 0.0 || self.dampening != 0.0) {
            return Err(Error::InvalidArgument {
                op: "Sgd::step",
                reason: "Nesterov momentum needs momentum > 0 and dampening 0".into(),
            });
        }
        let _off = no_grad();
        each_gradient(model, |name, p, g| {
            let first = self.state.get(name, "momentum_buffer").is_none();
            let s = SgdStep {
                lr: self.lr,
                weight_decay: self.weight_decay,
                momentum: self.momentum,
                dampening: self.dampening,
                nesterov: self.nesterov,
                first,
            };
            let (at, shape) = (p.placement(), p.shape().to_vec());
            // Without momentum the buffer is a zero-size stand-in the kernel never reads.
            let mut buf = match self.state.slots.get_mut(name).and_then(|k| k.remove("momentum_buffer")) {
                Some(b) => b,
                None if self.momentum != 0.0 => Tensor::zeros_on(at, &shape)?,
                None => Tensor::zeros_on(at, [0])?,
            };
            if matches!(at.id(), DeviceId::Cuda(_)) {
                fused::sgd(p.values_mut("Sgd::step"), &g, &mut buf, &s)?;
            } else {
                let (np, nb) = fused::sgd_by_ops(&p.detach(), &g, &buf, &s)?;
                p.set(np)?;
                buf = nb;
            }
            if self.momentum != 0.0 {
                self.state.slots.entry(name.to_string()).or_default().insert("momentum_buffer", buf);
            }
            Ok(())
        })
    }

    /// Saves the momentum buffers by parameter name.
    pub fn save_state(&self, path: impl AsRef<Path>) -> Result<()> {
        self.state.save(path)
    }

    /// Loads momentum buffers saved by [`save_state`](Self::save_state), onto this
    /// optimizer's placement (load the file with `load_safetensors::<D>`).
    pub fn load_state(&mut self, checkpoint: &Checkpoint<D>) -> Result<()> {
        self.state.load(checkpoint, &["momentum_buffer"])
    }
}

impl<D: Device, T: Float> ToDevice for Sgd<D, T> {
    type On<E: Device> = Sgd<E, T>;
    fn to_placement<E: Device>(&self, placement: E) -> Result<Sgd<E, T>> {
        Ok(Sgd {
            lr: self.lr,
            momentum: self.momentum,
            dampening: self.dampening,
            nesterov: self.nesterov,
            weight_decay: self.weight_decay,
            state: self.state.to_placement(placement)?,
        })
    }
}
