//! `Parameters`: a model's parameters by name (PyTorch's `named_parameters()`), and the
//! named state dict built on it: saved to and loaded from safetensors by name, onto the
//! model's own placement.

use std::path::Path;

use crate::autograd::Param;
use crate::checkpoint::{save_safetensors, AnyTensor, Checkpoint};
use crate::device::Device;
use crate::element::Float;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// A value holding parameters on placement `D`, each with a name (`"0.weight"`,
/// `"encoder.bias"`), as PyTorch's `named_parameters()` lists them.
///
/// `#[derive(Parameters)]` implements it for a struct generic over `D` (each field that
/// mentions `D`, named by the field); it is implemented here for [`Param`], the blocks of
/// [`nn`](crate::nn), and `Option`, `Vec` (named by index), `Box` and arrays of
/// `Parameters` values.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::nn::{self, Linear, Parameters};
/// use locus::Cuda;
/// let layer = Linear::<Cuda<0>>::new(3, 2, 0)?;
/// let names: Vec<String> = nn::named_parameters(&layer).into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["weight", "bias"]);
/// # Ok::<(), locus::Error>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` lists no parameters on `{D}`",
    label = "no parameters on `{D}` here",
    note = "an optimizer steps the parameters of its own placement: make it for the model's placement, or move a model and its optimizer with one call, `(model, optimizer).to::<..>()`; a type of your own lists its parameters with `#[derive(Parameters)]`"
)]
pub trait Parameters<D: Device, T: Float = f32> {
    /// Calls `f` with each parameter's name (under `prefix`) and the parameter.
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Param<D, T>));

    /// Calls `f` with each parameter's name (under `prefix`) and the parameter, to change.
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Param<D, T>));
}

/// `prefix.name`, or `name` at the top.
#[doc(hidden)]
pub fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

impl<D: Device, T: Float> Parameters<D, T> for Param<D, T> {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Param<D, T>)) {
        f(prefix, self)
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Param<D, T>)) {
        f(prefix, self)
    }
}

impl<D: Device, T: Float, P: Parameters<D, T>> Parameters<D, T> for Option<P> {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Param<D, T>)) {
        if let Some(p) = self {
            p.visit_params(prefix, f)
        }
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Param<D, T>)) {
        if let Some(p) = self {
            p.visit_params_mut(prefix, f)
        }
    }
}

impl<D: Device, T: Float, P: Parameters<D, T> + ?Sized> Parameters<D, T> for Box<P> {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Param<D, T>)) {
        (**self).visit_params(prefix, f)
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Param<D, T>)) {
        (**self).visit_params_mut(prefix, f)
    }
}

impl<D: Device, T: Float, P: Parameters<D, T>> Parameters<D, T> for Vec<P> {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Param<D, T>)) {
        self.as_slice().visit_params(prefix, f)
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Param<D, T>)) {
        self.as_mut_slice().visit_params_mut(prefix, f)
    }
}

impl<D: Device, T: Float, P: Parameters<D, T>> Parameters<D, T> for [P] {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Param<D, T>)) {
        for (i, p) in self.iter().enumerate() {
            p.visit_params(&join(prefix, &i.to_string()), f)
        }
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Param<D, T>)) {
        for (i, p) in self.iter_mut().enumerate() {
            p.visit_params_mut(&join(prefix, &i.to_string()), f)
        }
    }
}

impl<D: Device, T: Float, P: Parameters<D, T>, const N: usize> Parameters<D, T> for [P; N] {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Param<D, T>)) {
        self.as_slice().visit_params(prefix, f)
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Param<D, T>)) {
        self.as_mut_slice().visit_params_mut(prefix, f)
    }
}

/// Every parameter of `model` with its name, in the model's order (clones: the same
/// parameters).
pub fn named_parameters<D: Device, T: Float>(model: &impl Parameters<D, T>) -> Vec<(String, Param<D, T>)> {
    let mut out = Vec::new();
    model.visit_params("", &mut |name, p| out.push((name.to_string(), p.clone())));
    out
}

/// Forgets every parameter's gradient (`model.zero_grad()`).
pub fn zero_grad<D: Device, T: Float>(model: &impl Parameters<D, T>) {
    model.visit_params("", &mut |_, p| p.zero_grad());
}

/// The values of every parameter by name, without the tape (`model.state_dict()`).
pub fn state_dict<D: Device, T: Float>(model: &impl Parameters<D, T>) -> Vec<(String, Tensor<D, T>)> {
    let mut out = Vec::new();
    model.visit_params("", &mut |name, p| out.push((name.to_string(), p.detach())));
    out
}

/// Saves the model's parameters to a safetensors file by name.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::nn::{self, Linear};
/// use locus::{Cpu, Cuda};
/// let path = std::env::temp_dir().join(format!("locus-doc-state-{}.safetensors", std::process::id()));
/// let a = Linear::<Cuda<0>>::new(3, 2, 1)?;
/// nn::save_state_dict(&a, &path)?;
/// let mut b = Linear::<Cpu>::new(3, 2, 2)?; // other values, another placement
/// nn::load_state_dict(&mut b, &locus::load_safetensors::<Cpu>(&path)?)?;
/// assert_eq!(b.weight.to_vec()?, a.weight.to_vec()?);
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), locus::Error>(())
/// ```
pub fn save_state_dict<D: Device, T: Float>(model: &impl Parameters<D, T>, path: impl AsRef<Path>) -> Result<()> {
    save_safetensors(path, state_dict(model).into_iter().map(|(n, t)| (n, AnyTensor::from(t))))
}

/// Loads every parameter of `model` from `checkpoint` by name (PyTorch's
/// `load_state_dict(strict=True)`): a missing name, an extra one, or a shape or type that
/// differs is an `Err` naming the tensor, and then no parameter has changed. Each load
/// counts as a write of the parameter (ops that read the old values cannot run backward).
pub fn load_state_dict<D: Device, T: Float>(
    model: &mut impl Parameters<D, T>,
    checkpoint: &Checkpoint<D>,
) -> Result<()> {
    let mut values = Vec::new();
    let mut first_err = None;
    model.visit_params("", &mut |name, p| {
        if first_err.is_some() {
            return;
        }
        match checkpoint.get::<T>(name) {
            Ok(t) if t.shape() == p.shape() => values.push(t),
            Ok(t) => {
                first_err = Some(Error::InvalidArgument {
                    op: "load_state_dict",
                    reason: format!(
                        "`{name}` has shape {:?} in the checkpoint but {:?} in the model",
                        t.shape(),
                        p.shape()
                    ),
                })
            }
            Err(e) => first_err = Some(e),
        }
    });
    if let Some(e) = first_err {
        return Err(e);
    }
    let known: Vec<String> = named_parameters(model).into_iter().map(|(n, _)| n).collect();
    if let Some(extra) = checkpoint.names().find(|n| !known.iter().any(|k| k == n)) {
        return Err(Error::InvalidArgument {
            op: "load_state_dict",
            reason: format!("the checkpoint has `{extra}`, which the model has no parameter for"),
        });
    }
    let mut values = values.into_iter();
    let mut result = Ok(());
    model.visit_params_mut("", &mut |_, p| {
        if let (Some(v), Ok(())) = (values.next(), &result) {
            result = p.set(v);
        }
    });
    result
}
