//! The state an optimizer keeps per parameter name: tensors on its placement, moved
//! whole with `ToDevice`, saved to and loaded from safetensors under `state.{name}.{key}`.

use std::collections::BTreeMap;
use std::path::Path;

use crate::checkpoint::{save_safetensors, AnyTensor, Checkpoint};
use crate::device::Device;
use crate::element::Float;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Named tensors per parameter: `slots[param][key]`.
pub(crate) struct State<D: Device, T: Float> {
    pub slots: BTreeMap<String, BTreeMap<&'static str, Tensor<D, T>>>,
}

impl<D: Device, T: Float> Default for State<D, T> {
    fn default() -> Self {
        State { slots: BTreeMap::new() }
    }
}

impl<D: Device, T: Float> State<D, T> {
    pub(crate) fn get(&self, param: &str, key: &'static str) -> Option<&Tensor<D, T>> {
        self.slots.get(param)?.get(key)
    }

    pub(crate) fn set(&mut self, param: &str, key: &'static str, value: Tensor<D, T>) {
        self.slots.entry(param.to_string()).or_default().insert(key, value);
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
        Ok(State { slots })
    }

    pub(crate) fn save(&self, path: impl AsRef<Path>) -> Result<()> {
        let list = self
            .slots
            .iter()
            .flat_map(|(name, keys)| keys.iter().map(move |(k, t)| (format!("state.{name}.{k}"), AnyTensor::from(t))));
        save_safetensors(path, list)
    }

    /// The state in `ckpt`, whose names are `state.{param}.{key}` with `key` one of
    /// `keys`; anything else is an `Err` naming it, and then nothing has changed.
    pub(crate) fn load(&mut self, ckpt: &Checkpoint<D>, keys: &[&'static str]) -> Result<()> {
        let mut slots: BTreeMap<String, BTreeMap<&'static str, Tensor<D, T>>> = BTreeMap::new();
        for name in ckpt.names() {
            let parsed = name
                .strip_prefix("state.")
                .and_then(|rest| rest.rsplit_once('.'))
                .and_then(|(param, key)| keys.iter().find(|k| **k == key).map(|k| (param, *k)));
            let Some((param, key)) = parsed else {
                return Err(Error::InvalidArgument {
                    op: "load_state",
                    reason: format!(
                        "`{name}` is no optimizer state of this kind (expected state.<param>.<{}>)",
                        keys.join("|")
                    ),
                });
            };
            slots.entry(param.to_string()).or_default().insert(key, ckpt.get::<T>(name)?);
        }
        self.slots = slots;
        Ok(())
    }
}
