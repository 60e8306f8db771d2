//! Reverse-mode automatic differentiation typed to devices (docs/DESIGN.md, section 5c).
//!
//! Ops on a [`Param`] (and on results of ops on one) record a tape; `loss.backward()`
//! walks it back and adds each parameter's gradient to [`Param::grad`], a tensor on the
//! parameter's own placement. Each rule runs on the stream its op ran on, so streams
//! order backward as they ordered forward. [`no_grad`] turns recording off.
//!
//! - `node`: the tape's nodes (leaves hold gradients, ops hold rules), freed without
//!   recursion.
//! - `mode`: the per-thread recording switch and its guard.
//! - `autocast`: f32 products computed in a 16-bit type inside a scope.
//! - `record`: how an op joins the tape (`track1`, `track2`, `track_all`).
//! - `engine`: the backward pass and `Tensor::backward`.
//! - `param`: `Param`, `detach`, `tracks_grad`.
//! - `grad_math`: the small expressions rules are written in (a gradient summed back
//!   over broadcast dims, scalar factors, masks).

mod autocast;
mod engine;
mod grad_math;
mod mode;
mod node;
mod param;
mod record;

pub(crate) use autocast::autocast_type;
pub use autocast::{autocast, HalfFloat};
pub use mode::{enable_grad, is_grad_enabled, no_grad, NoGrad};
pub(crate) use node::Node;
pub(crate) use param::linked_replicas;
pub use param::{GradLeaf, Param};
