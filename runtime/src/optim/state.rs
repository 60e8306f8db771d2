//! The state an optimizer keeps per parameter name: tensors on its placement, moved
//! whole with `ToDevice`, saved to and loaded from safetensors under `state.{name}.{key}`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::autograd::Param;
use crate::checkpoint::{save_safetensors, AnyTensor, Checkpoint};
use crate::device::{Cpu, Device};
use crate::element::Float;
use crate::error::{Error, Result};
use crate::nn::Parameters;
use crate::tensor::Tensor;

/// Named tensors per parameter, `slots[param][key]`, and the steps each parameter took
/// (on the host: an update reads it without waiting for the device).
pub(crate) struct State<D: Device, T: Float> {
    pub slots: BTreeMap<String, BTreeMap<&'static str, Tensor<D, T>>>,
    pub steps: BTreeMap<String, u64>,
}

impl<D: Device, T: Float> Default for State<D, T> {
    fn default() -> Self {
        State { slots: BTreeMap::new(), steps: BTreeMap::new() }
    }
}

impl<D: Device, T: Float> State<D, T> {
    pub(crate) fn get(&self, param: &str, key: &'static str) -> Option<&Tensor<D, T>> {
        self.slots.get(param)?.get(key)
    }

    /// The tensor `key` of `param`, made by `init` the first time.
    pub(crate) fn slot(
        &mut self,
        param: &str,
        key: &'static str,
        init: impl FnOnce() -> Result<Tensor<D, T>>,
    ) -> Result<&mut Tensor<D, T>> {
        let keys = self.slots.entry(param.to_string()).or_default();
        if !keys.contains_key(key) {
            keys.insert(key, init()?);
        }
        keys.get_mut(key)
            .ok_or_else(|| Error::InvalidArgument { op: "optimizer", reason: "a state slot vanished".into() })
    }

    /// Every tensor on `placement`.
    pub(crate) fn to_placement<E: Device>(&self, placement: E) -> Result<State<E, T>> {
        let mut slots = BTreeMap::new();
        for (name, keys) in &self.slots {
            let mut moved = BTreeMap::new();
            for (k, t) in keys {
                moved.insert(*k, t.copy_to(placement)?);
            }
            slots.insert(name.clone(), moved);
        }
        Ok(State { slots, steps: self.steps.clone() })
    }

    /// Writes every slot, and each step count as a 0-d f32 tensor `state.{name}.step` (as
    /// PyTorch keeps it).
    pub(crate) fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let mut list: Vec<(String, AnyTensor<Cpu>)> = Vec::new();
        for (name, keys) in &self.slots {
            for (k, t) in keys {
                list.push((format!("state.{name}.{k}"), AnyTensor::from(t.to::<Cpu>()?)));
            }
        }
        for (name, steps) in &self.steps {
            list.push((format!("state.{name}.step"), AnyTensor::from(Tensor::<Cpu, f32>::full([], *steps as f32)?)));
        }
        save_safetensors(path, list)
    }

    /// The state in `ckpt`, whose names are `state.{param}.{key}` with `key` one of
    /// `keys`; anything else is an `Err` naming it, and then nothing has changed.
    pub(crate) fn load(&mut self, ckpt: &Checkpoint<D>, keys: &[&'static str]) -> Result<()> {
        let mut slots: BTreeMap<String, BTreeMap<&'static str, Tensor<D, T>>> = BTreeMap::new();
        let mut steps = BTreeMap::new();
        for name in ckpt.names() {
            match name.strip_prefix("state.").and_then(|rest| rest.rsplit_once('.')) {
                Some((param, "step")) => {
                    let step = ckpt.get::<f32>(name)?.item()?;
                    if !(step >= 0.0 && step.fract() == 0.0) {
                        return Err(Error::InvalidArgument {
                            op: "load_state",
                            reason: format!("`{name}` is {step}, not a count of steps"),
                        });
                    }
                    steps.insert(param.to_string(), step as u64);
                }
                Some((param, key)) if keys.contains(&key) => {
                    let key = keys.iter().find(|k| **k == key).copied().unwrap_or_default();
                    slots.entry(param.to_string()).or_default().insert(key, ckpt.get::<T>(name)?);
                }
                _ => {
                    return Err(Error::InvalidArgument {
                        op: "load_state",
                        reason: format!(
                            "`{name}` is no optimizer state of this kind (expected state.<param>.<{}|step>)",
                            keys.join("|")
                        ),
                    })
                }
            }
        }
        self.slots = slots;
        self.steps = steps;
        Ok(())
    }
}

/// Calls `f` with the name, the parameter and the gradient of every parameter of `model`
/// that has one, in the model's order, stopping at the first `Err` (what every update and
/// check of the optimizers walks).
pub(crate) fn each_gradient<D: Device, T: Float>(
    model: &mut impl Parameters<D, T>,
    mut f: impl FnMut(&str, &mut Param<D, T>, Tensor<D, T>) -> Result<()>,
) -> Result<()> {
    let mut result = Ok(());
    model.visit_params_mut("", &mut |name, p| {
        if result.is_ok() {
            if let Some(g) = p.grad() {
                result = f(name, p, g);
            }
        }
    });
    result
}
