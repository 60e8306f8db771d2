//! A whole training step as one graph (PyTorch's whole-network capture): the forward
//! pass, `backward` and an AdamW update, captured once and replayed per batch. The
//! parameters and the optimizer's moments are static buffers the graph updates in place;
//! the batch goes in through the graph's inputs; the values that change each step
//! (learning rate, bias corrections) are read by the update from a small device tensor
//! the step writes before each replay, so a replay is the next step, not the first again.

use std::sync::Arc;

use super::AdamW;
use crate::backend::{AnyGraph, AnyStream, Buffer};
use crate::device::Device;
use crate::element::Float;
use crate::error::{Error, Result};
use crate::graph::{begin, launch, not_replayed, seal, GraphInputs, InputMut, Output, Parts, WritesOn};
use crate::nn::Parameters;
use crate::storage::Storage;
use crate::stream::Stream;
use crate::tensor::Tensor;

/// A training step of `model` with `opt`, captured once: each [`replay`](Self::replay)
/// runs the forward pass, the backward pass and the AdamW update on the batch in the
/// inputs, with one launch. The model and the optimizer are borrowed for as long as the
/// step lives (nothing else can change or read them meanwhile, except through
/// [`module`](Self::module)); after it, they hold the trained weights and the moments and
/// step counts of every replay, as if each step had run eagerly.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::nn::{Linear, Module};
/// use locus::optim::AdamW;
/// use locus::{Cuda, GraphedStep, Stream, Tensor};
/// let stream = Stream::<Cuda<0>>::new()?;
/// let mut model = Linear::<Cuda<0>>::new(2, 1, 0)?;
/// let mut opt = AdamW::new(0.05);
/// let (mut x, mut y) = (Tensor::<Cuda<0>>::zeros([4, 2])?, Tensor::<Cuda<0>>::zeros([4, 1])?);
/// let mut step = GraphedStep::capture(&stream, &mut model, &mut opt, (&mut x, &mut y), |m, (x, y)| {
///     (m.forward(x)? - y)?.square()?.mean()
/// })?;
/// let batch = Tensor::<Cuda<0>>::ones([4, 2])?;
/// step.inputs_mut().0.copy_from(&batch)?;
/// let first = step.replay()?.item()?;
/// for _ in 0..50 {
///     step.replay()?;
/// }
/// assert!(step.replay()?.item()? < first / 10.0);
/// # Ok::<(), locus::Error>(())
/// ```
pub struct GraphedStep<'m, D: Device, T: Float, M, I> {
    model: &'m mut M,
    opt: &'m mut AdamW<D, T>,
    inputs: I,
    /// The loss of the last replay: the graph's output.
    loss: Tensor<D, T>,
    /// Decay, step size and `√(1 − β₂ᵗ)` of the next replay's update.
    hyper: Tensor<D, f64>,
    /// The steps taken (the optimizer's count for every parameter it updates).
    steps: u64,
    /// The parameters the update changes: those with a gradient in the capture (as an
    /// eager AdamW step skips a parameter without one, and leaves its count).
    stepped: Vec<String>,
    raw: AnyGraph,
    stream: Stream<D>,
    last: Option<AnyStream>,
    written: Vec<Arc<Storage>>,
}

impl<D: Device, T: Float, M, I> std::fmt::Debug for GraphedStep<'_, D, T, M, I> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GraphedStep on {} ({} steps)", self.stream.device(), self.steps)
    }
}

/// The storages a step writes in place: every parameter's values and moments.
fn state_of<'a, D: Device, T: Float>(model: &'a impl Parameters<D, T>, opt: &'a AdamW<D, T>) -> Vec<Arc<Storage>> {
    let mut all = Vec::new();
    model.visit_params("", &mut |_, p| all.push(Arc::clone(p.tensor().shared_storage())));
    all.extend(opt.state_tensors().map(|t| Arc::clone(t.shared_storage())));
    all
}

impl<'m, D, T, M, I> GraphedStep<'m, D, T, M, I>
where
    D: Device,
    T: Float,
    M: Parameters<D, T>,
    I: for<'c> GraphInputs<'c, D>,
{
    /// Captures one step on `stream`: `loss` computes the loss of `model` on the inputs
    /// (given as `&Tensor`s, as [`Graph::capture`](crate::Graph::capture) gives them); the
    /// step adds `backward` and `opt`'s update. Nothing runs until [`replay`](Self::replay).
    ///
    /// The optimizer's moments are made here if it has none (zeros). The update changes the
    /// parameters that get a gradient in the captured pass (as an eager step skips one
    /// without), and those must have taken as many steps as each other. The gradients the
    /// parameters held are dropped; inside the graph they live in its own memory.
    pub fn capture<F>(
        stream: &Stream<D>,
        model: &'m mut M,
        opt: &'m mut AdamW<D, T>,
        inputs: I,
        loss: F,
    ) -> Result<Self>
    where
        F: for<'c> FnOnce(&M, <I as GraphInputs<'c, D>>::Refs) -> Result<Tensor<D, T>>,
    {
        Self::capture_with(stream, model, opt, inputs, None, loss)
    }

    /// [`capture`](Self::capture) with the gradients clipped to a global norm of
    /// `max_norm` between backward and the update ([`clip_grad_norm`](crate::optim::clip_grad_norm),
    /// on the device, so inside the graph).
    pub fn capture_clipped<F>(
        stream: &Stream<D>,
        model: &'m mut M,
        opt: &'m mut AdamW<D, T>,
        inputs: I,
        max_norm: f64,
        loss: F,
    ) -> Result<Self>
    where
        F: for<'c> FnOnce(&M, <I as GraphInputs<'c, D>>::Refs) -> Result<Tensor<D, T>>,
    {
        Self::capture_with(stream, model, opt, inputs, Some(max_norm), loss)
    }

    fn capture_with<F>(
        stream: &Stream<D>,
        model: &'m mut M,
        opt: &'m mut AdamW<D, T>,
        mut inputs: I,
        clip: Option<f64>,
        loss: F,
    ) -> Result<Self>
    where
        F: for<'c> FnOnce(&M, <I as GraphInputs<'c, D>>::Refs) -> Result<Tensor<D, T>>,
    {
        if let Some(max_norm) = clip.filter(|n| !(n.is_finite() && *n > 0.0)) {
            return Err(Error::InvalidArgument {
                op: "GraphedStep::capture_clipped",
                reason: format!("the norm to clip to is {max_norm}; it must be finite and above 0"),
            });
        }
        let mut result = Ok(());
        let mut seen = std::collections::HashSet::new();
        model.visit_params_mut("", &mut |name, p| {
            p.zero_grad();
            if result.is_ok() && !seen.insert(Arc::as_ptr(p.node())) {
                result = Err(Error::InvalidArgument {
                    op: "GraphedStep::capture",
                    reason: format!(
                        "`{name}` is a parameter the model holds twice (tied weights); a graphed step updates each \
                         name's memory in place, which would untie them"
                    ),
                });
            }
            if result.is_ok() {
                result = p.own_memory();
            }
        });
        result?;
        opt.prepare_graphed(&*model)?;
        inputs.own_memory()?;
        let at = {
            let mut first = None;
            model.visit_params("", &mut |_, p| {
                first.get_or_insert(p.placement());
            });
            first.ok_or_else(|| Error::InvalidArgument {
                op: "GraphedStep::capture",
                reason: "the model has no parameters: there is no step to capture".into(),
            })?
        };
        let mut hyper = Tensor::<D, f64>::zeros_on(at, [3])?;
        hyper.own_memory()?;
        let ending = {
            let mut ins = Parts { tensors: Vec::new() };
            inputs.parts(&mut ins);
            ins.tensors.push(hyper.shared_storage());
            let state = state_of(&*model, &*opt);
            let state: Vec<&Arc<Storage>> = state.iter().collect();
            // `state_of`'s handles go before the capture: the update writes in place only
            // memory no other handle shares.
            let ending = begin(stream, &ins.tensors, &state);
            drop(state);
            ending?
        };
        let out = ending.run(|| -> Result<(Tensor<D, T>, Vec<String>, u64)> {
            let l = loss(&*model, inputs.refs())?;
            l.backward()?;
            let clipped = match clip {
                Some(max_norm) => crate::optim::clip_grad_norm(&*model, max_norm).map(drop),
                None => Ok(()),
            };
            let stepped = clipped.and_then(|()| opt.step_graphed(model, &hyper));
            // The gradients were made in the capture: they go with it, not with the model.
            model.visit_params("", &mut |_, p| p.zero_grad());
            let stepped = stepped?;
            let steps = opt.common_steps(&stepped)?;
            Ok((l.detach(), stepped, steps))
        });
        let raw = ending.end();
        let ((loss, stepped, steps), raw) = (out?, raw?);
        let written = {
            let mut ins = Parts { tensors: Vec::new() };
            inputs.parts(&mut ins);
            ins.tensors.push(hyper.shared_storage());
            let state = state_of(&*model, &*opt);
            // Each of `state`'s storages is held by its owner and by `state`.
            let mut held: Vec<Arc<Storage>> = Vec::new();
            for s in &state {
                if Arc::strong_count(s) != 2 {
                    return Err(Error::InvalidArgument {
                        op: "GraphedStep::capture",
                        reason: "a parameter's or moment's memory is held outside the model and the optimizer \
                                 after the capture; a replay would change it under its holder"
                            .into(),
                    });
                }
                held.push(Arc::clone(s));
            }
            let sealed = seal(&raw, &ins.tensors, &[loss.shared_storage()]);
            for s in &held {
                s.buf.forget_captured_writes();
            }
            sealed?
        };
        Ok(GraphedStep {
            model,
            opt,
            inputs,
            loss,
            hyper,
            steps,
            stepped,
            raw,
            stream: stream.clone(),
            last: None,
            written,
        })
    }

    /// Queues one step on the capture's stream (the next of the optimizer's count, at its
    /// current learning rate) and returns its loss, as that replay writes it.
    pub fn replay(&mut self) -> Result<Output<'_, D, T>> {
        let t = self.steps + 1;
        let s = self.opt.step_values(t);
        // Queued on the stream this replay runs on, behind the last one.
        let on = WritesOn(Some(self.stream.raw.clone()));
        InputMut::new(&mut self.hyper, &on).copy_from_slice(&[s.decay, s.step, s.bc2_sqrt])?;
        let state = state_of(&*self.model, &*self.opt);
        let mut ins = Parts { tensors: Vec::new() };
        self.inputs.parts(&mut ins);
        let reads: Vec<&Buffer> =
            ins.tensors.iter().map(|s| &s.buf).chain(std::iter::once(&self.hyper.shared_storage().buf)).collect();
        let writes: Vec<&Buffer> = self.written.iter().chain(&state).map(|s| &s.buf).collect();
        launch(&self.raw, self.stream.device(), &mut self.last, &self.stream.raw, &reads, &writes)?;
        self.steps = t;
        self.opt.set_steps(&self.stepped, t);
        Ok(Output::new(&self.loss))
    }

    /// The inputs, for the next batch (as [`Graph::inputs_mut`](crate::Graph::inputs_mut)).
    pub fn inputs_mut(&mut self) -> <I as GraphInputs<'_, D>>::Writers {
        self.inputs.writers(&WritesOn(self.last.clone()))
    }

    /// The loss of the last replay; an error before the first.
    pub fn loss(&self) -> Result<Output<'_, D, T>> {
        match self.last {
            Some(_) => Ok(Output::new(&self.loss)),
            None => Err(not_replayed()),
        }
    }

    /// The model as the replays so far leave it (reads wait for them, as for any write).
    pub fn module(&self) -> &M {
        self.model
    }

    /// The learning rate of the next replays (a schedule's step).
    pub fn set_lr(&mut self, lr: f64) {
        self.opt.set_lr(lr);
    }

    /// The steps taken, by the optimizer's count.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// The stream the step was captured on, where it replays.
    pub fn stream(&self) -> &Stream<D> {
        &self.stream
    }
}
