//! Optimizers whose state lives on their parameters' placement (PyTorch's `torch.optim`):
//! [`Sgd`] (momentum, Nesterov, weight decay) and [`AdamW`], gradient clipping by global
//! norm ([`clip_grad_norm`]) and a cosine learning-rate schedule with warm-up
//! ([`CosineWithWarmup`]).
//!
//! An optimizer is typed by its placement: `AdamW<Cuda<0>>` steps models whose
//! [`Parameters`](crate::nn::Parameters) are on `Cuda<0>` and holds its moments there, so
//! stepping a model on `Cuda<1>` does not compile, and moving a model and its optimizer
//! is one call, `(model, opt).to::<Cuda<1>>()`. State is kept by parameter name and saves
//! to and loads from safetensors by name (`state.{name}.{exp_avg,exp_avg_sq,step}` for
//! AdamW, `state.{name}.momentum_buffer` for SGD).
//!
//! - `sgd`, `adamw`: the optimizers.
//! - `clip`: `clip_grad_norm`.
//! - `scaler`: `GradScaler` and the typed states of scaled gradients (`Scaled`,
//!   `Unscaled`), the `Optimizer` trait it steps.
//! - `schedule`: `CosineWithWarmup`.
//! - `fused`: SGD as one kernel per parameter, in place, and what `multi` shares.
//! - `multi`: AdamW and clipping over up to 32 tensors per kernel (CUDA C in
//!   `update.cu`, and the host's fallbacks).
//! - `state`: the per-name state both optimizers keep, its moves and files.
//! - `graphed_step`: `GraphedStep`, a whole training step (forward, backward, AdamW) as
//!   one graph, the weights and moments updated in place.

/// `static`s of the update kernels (update.cu), each with its host fallback, for `fused`
/// and `multi`: `NAME = "extern C name", host_fn;`.
macro_rules! sources {
    ($($stat:ident = $name:literal, $host:expr;)*) => {$(
        static $stat: KernelSource = KernelSource::new($name, SOURCE, "inline", Some($host));
    )*};
}

mod adamw;
mod clip;
mod fused;
mod graphed_step;
mod multi;
mod scaler;
mod schedule;
mod sgd;
mod state;

pub use adamw::AdamW;
pub use clip::clip_grad_norm;
pub use graphed_step::GraphedStep;
pub use scaler::{GradScaler, Optimizer, Scaled, StillScaled, Unscaled};
pub use schedule::CosineWithWarmup;
pub use sgd::Sgd;
