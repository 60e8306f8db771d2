//! `Dropout`: in training, each element zeroed with probability `p` and the rest scaled
//! by `1/(1 − p)` (PyTorch's `nn.Dropout`); in evaluation, the identity. The mask comes
//! from a seeded generator of the layer's own, so a run is repeatable.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::init::derive_seed;
use super::params::Parameters;
use crate::autograd::Param;
use crate::device::Device;
use crate::element::Float;
use crate::error::{Error, Result};
use crate::parallel::Module;
use crate::tensor::Tensor;
use crate::to_device::ToDevice;

/// Zeroes elements with probability `p` while training (`train(true)`, the default).
/// Each call draws a new mask: the `k`-th call's mask comes from the seed and `k`, on the
/// input's device.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::nn::{Dropout, Module};
/// use locus::{Cuda, Tensor};
/// let drop = Dropout::new(0.5, 42)?;
/// let y: Tensor<Cuda<0>> = drop.forward(&Tensor::ones([1000])?)?;
/// let kept = y.to_vec()?.iter().filter(|v| **v == 2.0).count();
/// assert!((400..600).contains(&kept));
/// drop.train(false);
/// assert_eq!(drop.forward(&Tensor::<Cuda<0>>::ones([3])?)?.to_vec()?, vec![1.0; 3]);
/// # Ok::<(), locus::Error>(())
/// ```
pub struct Dropout<D: Device = crate::device::Dyn, T: Float = f32> {
    p: f64,
    seed: u64,
    calls: AtomicU64,
    training: AtomicBool,
    _on: PhantomData<fn() -> (D, T)>,
}

impl<D: Device, T: Float> Dropout<D, T> {
    /// Dropout with probability `p` in `[0, 1)`, its masks from `seed`.
    pub fn new(p: f64, seed: u64) -> Result<Self> {
        if !(0.0..1.0).contains(&p) {
            return Err(Error::InvalidArgument { op: "Dropout", reason: format!("p must be in [0, 1), got {p}") });
        }
        Ok(Dropout { p, seed, calls: AtomicU64::new(0), training: AtomicBool::new(true), _on: PhantomData })
    }

    /// Training (masks drawn) or evaluation (identity): PyTorch's `train()` / `eval()`.
    pub fn train(&self, on: bool) {
        self.training.store(on, Ordering::Relaxed);
    }
}

impl<D: Device, T: Float> Module<D, T> for Dropout<D, T> {
    fn forward(&self, x: &Tensor<D, T>) -> Result<Tensor<D, T>> {
        if !self.training.load(Ordering::Relaxed) || self.p == 0.0 {
            return Ok(x.clone());
        }
        let k = self.calls.fetch_add(1, Ordering::Relaxed);
        let u = Tensor::<D, T>::rand_on(x.placement(), x.shape(), derive_seed(self.seed, k + 1))?;
        let keep = u.ge_scalar(T::from_f64(self.p))?.to_dtype::<T>()?.scaled(1.0 / (1.0 - self.p))?;
        x * &keep
    }
}

impl<D: Device, T: Float> Parameters<D, T> for Dropout<D, T> {
    fn visit_params(&self, _: &str, _: &mut dyn FnMut(&str, &Param<D, T>)) {}
    fn visit_params_mut(&mut self, _: &str, _: &mut dyn FnMut(&str, &mut Param<D, T>)) {}
}

impl<D: Device, T: Float> ToDevice for Dropout<D, T> {
    type On<E: Device> = Dropout<E, T>;
    fn to_placement<E: Device>(&self, _: E) -> Result<Dropout<E, T>> {
        Ok(Dropout {
            p: self.p,
            seed: self.seed,
            calls: AtomicU64::new(self.calls.load(Ordering::Relaxed)),
            training: AtomicBool::new(self.training.load(Ordering::Relaxed)),
            _on: PhantomData,
        })
    }
}
