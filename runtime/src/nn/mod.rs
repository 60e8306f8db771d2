//! Building blocks of models, generic over their placement (PyTorch's `torch.nn`):
//! [`Linear`], [`Embedding`], [`LayerNorm`], [`Dropout`], the activations, [`Sequential`],
//! the initialisations of [`init`], and [`Parameters`], the trait that lists a model's
//! parameters by name for optimizers and checkpoints (`#[derive(Parameters)]` writes it
//! for a struct of blocks).
//!
//! - `params`: the `Parameters` trait, its impls for `Param` and containers, and the
//!   named `state_dict` saved to and loaded from safetensors.
//! - `linear`, `embedding`, `layer_norm`, `dropout`, `activation`, `sequential`: one
//!   block each.
//! - `init`: uniform, normal and PyTorch's default initialisations.

mod activation;
mod dropout;
mod embedding;
pub mod init;
mod layer_norm;
mod linear;
mod params;
mod sequential;

pub use activation::{Gelu, Relu, Sigmoid, Tanh};
pub use dropout::Dropout;
pub use embedding::Embedding;
pub use layer_norm::LayerNorm;
pub use linear::Linear;
#[doc(hidden)]
pub use params::join;
pub use params::{load_state_dict, named_parameters, save_state_dict, state_dict, zero_grad, Parameters};
pub use sequential::{Layer, Sequential};

pub use crate::parallel::Module;
