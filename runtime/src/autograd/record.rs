//! How an op joins the tape: each differentiable op computes its result as before and
//! hands it to `track1`, `track2` or `track_all` with its backward rule. When no input
//! tracks gradients (or inside `no_grad`) the result is returned as it is, after one
//! pointer test per input; otherwise it gets a node holding the rule, the inputs' nodes
//! and versions, and the stream the op ran on.

use std::sync::Arc;

use super::mode::is_grad_enabled;
use super::node::{Edge, Node, Rule};
use crate::backend::dispatch::current;
use crate::device::Device;
use crate::element::Element;
use crate::error::Result;
use crate::tensor::{Erased, Tensor};

fn edge<D: Device, T: Element>(t: &Tensor<D, T>) -> Option<Edge> {
    t.grad_fn().map(|node| Edge { node: Arc::clone(node), version: node.version() })
}

fn attach<O: Device, U: Element>(
    out: Tensor<O, U>,
    op: &'static str,
    edges: Vec<Option<Edge>>,
    rule: Rule,
) -> Tensor<O, U> {
    let device = out.device();
    let stream = current::current(device).map(|s| (device, s));
    out.with_grad_fn(Some(Node::op(op, edges, rule, stream)))
}

/// The gradient as a tensor on `placement`, or the error of a wrong internal type.
fn typed<O: Device, U: Element>(g: Erased, placement: O) -> Result<Tensor<O, U>> {
    g.typed(placement)
}

impl<D: Device, T: Element> Tensor<D, T> {
    /// `out`, the result of `op` on this tensor alone; `make` gives (from `out`) the rule that maps
    /// the gradient of `out` to this tensor's. `make` runs (saving what the rule needs)
    /// only when the op is recorded: an op on tensors that track nothing saves nothing.
    pub(crate) fn track1<O: Device, U: Element, R>(
        &self,
        out: Tensor<O, U>,
        op: &'static str,
        make: impl FnOnce(&Tensor<O, U>) -> R,
    ) -> Tensor<O, U>
    where
        R: Fn(Tensor<O, U>) -> Result<Tensor<D, T>> + Send + Sync + 'static,
    {
        if self.grad_fn().is_none() || !is_grad_enabled() {
            return out;
        }
        let rule = make(&out);
        let at = out.placement();
        let rule: Rule = Box::new(move |g| Ok(vec![Some(rule(typed(g, at)?)?.erase())]));
        attach(out, op, vec![edge(self)], rule)
    }

    /// `out`, the result of `op` on this tensor and `rhs`; `rule` gets the gradient of
    /// `out` and which of the two track gradients, and gives theirs (`None` for one that
    /// tracks none).
    #[allow(clippy::type_complexity)]
    pub(crate) fn track2<E: Device, V: Element, O: Device, U: Element, R>(
        &self,
        rhs: &Tensor<E, V>,
        out: Tensor<O, U>,
        op: &'static str,
        make: impl FnOnce(&Tensor<O, U>) -> R,
    ) -> Tensor<O, U>
    where
        R: Fn(Tensor<O, U>, [bool; 2]) -> Result<(Option<Tensor<D, T>>, Option<Tensor<E, V>>)> + Send + Sync + 'static,
    {
        if (self.grad_fn().is_none() && rhs.grad_fn().is_none()) || !is_grad_enabled() {
            return out;
        }
        let rule = make(&out);
        let at = out.placement();
        let needs = [self.grad_fn().is_some(), rhs.grad_fn().is_some()];
        let rule: Rule = Box::new(move |g| {
            let (a, b) = rule(typed(g, at)?, needs)?;
            Ok(vec![a.map(Tensor::erase), b.map(Tensor::erase)])
        });
        attach(out, op, vec![edge(self), edge(rhs)], rule)
    }

    /// `out`, the result of `op` on `inputs` (one placement and type); `rule` gets the
    /// gradient of `out` and which inputs track gradients, and gives one gradient per
    /// input.
    pub(crate) fn track_all<O: Device, U: Element, R>(
        inputs: &[&Self],
        out: Tensor<O, U>,
        op: &'static str,
        make: impl FnOnce(&Tensor<O, U>) -> R,
    ) -> Tensor<O, U>
    where
        R: Fn(Tensor<O, U>, &[bool]) -> Result<Vec<Option<Tensor<D, T>>>> + Send + Sync + 'static,
    {
        if inputs.iter().all(|t| t.grad_fn().is_none()) || !is_grad_enabled() {
            return out;
        }
        let rule = make(&out);
        let at = out.placement();
        let needs: Vec<bool> = inputs.iter().map(|t| t.grad_fn().is_some()).collect();
        let rule: Rule = Box::new(move |g| {
            let grads = rule(typed(g, at)?, &needs)?;
            Ok(grads.into_iter().map(|g| g.map(Tensor::erase)).collect())
        });
        attach(out, op, inputs.iter().map(|t| edge(t)).collect(), rule)
    }

    /// A value to keep for a backward rule: the same memory without this tensor's
    /// node (a rule holding nodes would keep the tape alive through itself).
    pub(crate) fn saved(&self) -> Self {
        self.clone().with_grad_fn(None)
    }
}
