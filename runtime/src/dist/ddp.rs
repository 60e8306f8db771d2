//! `DistributedDataParallel`: one process per device, each with a full copy of the model
//! and its share of every batch (PyTorch's `nn.parallel.DistributedDataParallel`). The
//! parameters are broadcast from rank 0 when it is made, so every rank starts equal;
//! `backward` runs the local backward pass and averages every gradient over the ranks
//! in buckets (25 MiB by default, in reverse registration order, as PyTorch lays them
//! out). A bucket's exchange starts the moment the pass has finished the last gradient
//! in it (and every earlier bucket has started: all ranks start them in one order), so
//! it overlaps the rest of the backward pass; every rank takes the same step and the
//! weights stay bit-identical.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::sync::Arc;

use crate::autograd::{Node, Param};
use crate::device::Device;
use crate::element::Float;
use crate::error::{Error, Result};
use crate::nn::Parameters;
use crate::tensor::{Erased, Tensor};

use super::bucket::bucket_ends;
use super::{ProcessGroup, ReduceOp, Work, DEFAULT_BUCKET_BYTES};

/// A model whose gradients are averaged over the ranks of a [`ProcessGroup`].
///
/// A parameter that gets no gradient on some rank (PyTorch's `find_unused_parameters`
/// trap, which hangs there) is an `Err` naming it, on every rank, after one small
/// exchange: no rank waits for a bucket another will not send.
pub struct DistributedDataParallel<'g, M> {
    module: M,
    group: &'g ProcessGroup,
    bucket_bytes: usize,
    last: Option<BackwardStats>,
}

impl<'g, M> DistributedDataParallel<'g, M> {
    /// Takes `module` and makes every rank's parameters rank 0's (a broadcast of each).
    pub fn new<D: Device, T: Float>(mut module: M, group: &'g ProcessGroup) -> Result<Self>
    where
        M: Parameters<D, T>,
    {
        let mut result = Ok(());
        module.visit_params_mut("", &mut |_, p| {
            if result.is_ok() {
                result = group.broadcast(&p.detach(), 0).and_then(|v| p.set(v));
            }
        });
        result?;
        Ok(DistributedDataParallel { module, group, bucket_bytes: DEFAULT_BUCKET_BYTES, last: None })
    }

    /// With buckets of `bytes` (at least one gradient each).
    pub fn bucket_bytes(mut self, bytes: usize) -> Self {
        self.bucket_bytes = bytes;
        self
    }

    /// The module.
    pub fn module(&self) -> &M {
        &self.module
    }

    /// The module, to change (an optimizer step: every rank steps the same gradients).
    pub fn module_mut(&mut self) -> &mut M {
        &mut self.module
    }

    /// The module back.
    pub fn into_inner(self) -> M {
        self.module
    }

    /// The local backward pass of `loss`, adding to the gradients without averaging them
    /// (PyTorch's `no_sync()`: gradient accumulation over several micro-batches, with one
    /// exchange at the last [`backward`](Self::backward)).
    pub fn backward_no_sync<D: Device, T: Float>(&mut self, loss: &Tensor<D, T>) -> Result<()> {
        loss.backward()
    }

    /// The local backward pass of `loss`, with every parameter's gradient averaged over
    /// the ranks: each bucket's exchange starts as soon as the pass has its gradients
    /// (overlapping the rest of the pass), and `backward` returns once all are averaged.
    ///
    /// A parameter without a gradient on some rank is an `Err` on every rank (the buckets
    /// carry one more element each: whether a rank missed one of their gradients), and
    /// the gradients are left as the local pass made them.
    pub fn backward<D: Device, T: Float>(&mut self, loss: &Tensor<D, T>) -> Result<()>
    where
        M: Parameters<D, T>,
    {
        let mut reducer = Reducer::new(self.group, self.params(), self.bucket_bytes, false);
        loss.backward_observing(&mut |leaf, g| reducer.ready(leaf, g))?;
        let result = reducer.finish();
        self.last = Some(BackwardStats { buckets: reducer.buckets.len(), started_during_backward: reducer.launched });
        result
    }

    /// How the last [`backward`](Self::backward) went: its buckets, and how many of them
    /// started exchanging while the backward pass was still running (the overlap). `None`
    /// before the first.
    pub fn last_backward(&self) -> Option<BackwardStats> {
        self.last
    }

    /// Averages every parameter's gradient over the ranks, all buckets at once (what
    /// `backward` does while its pass runs): for gradients made some other way, after
    /// [`backward_no_sync`](Self::backward_no_sync) passes or by hand.
    pub fn average_gradients<D: Device, T: Float>(&mut self) -> Result<()>
    where
        M: Parameters<D, T>,
    {
        Reducer::new(self.group, self.params(), self.bucket_bytes, true).finish()
    }

    /// Every parameter once (a parameter registered twice, tied weights, is one), in
    /// reverse registration order: the last layers' gradients are the first backward makes.
    fn params<D: Device, T: Float>(&self) -> Vec<(String, Param<D, T>)>
    where
        M: Parameters<D, T>,
    {
        let mut params: Vec<(String, Param<D, T>)> = Vec::new();
        let mut seen = HashSet::new();
        self.module.visit_params("", &mut |name, p| {
            if seen.insert(Arc::as_ptr(p.node())) {
                params.push((name.to_string(), p.clone()));
            }
        });
        params.reverse();
        params
    }
}

/// What the last [`DistributedDataParallel::backward`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackwardStats {
    /// The buckets exchanged.
    pub buckets: usize,
    /// Those whose exchange started before the backward pass had finished.
    pub started_during_backward: usize,
}

/// One backward pass's exchange (PyTorch DDP's reducer): buckets are started in order,
/// each once its gradients are complete, while the pass goes on.
struct Reducer<'g, D: Device, T: Float> {
    group: &'g ProcessGroup,
    params: Vec<(String, Param<D, T>)>,
    /// The gradient each parameter will hold after the pass (its accumulated one plus
    /// this pass's), once the pass has it.
    grads: Vec<Option<Tensor<D, T>>>,
    /// Which parameter a leaf is.
    index: HashMap<*const Node, usize>,
    /// Each bucket's range of `params`.
    buckets: Vec<Range<usize>>,
    /// The exchanges started, in bucket order.
    started: Vec<Work<Tensor<D, T>>>,
    /// How many started during the pass.
    launched: usize,
}

impl<'g, D: Device, T: Float> Reducer<'g, D, T> {
    /// The reducer of a pass about to run, or (`accumulated`) of the gradients the
    /// parameters hold now.
    fn new(
        group: &'g ProcessGroup,
        params: Vec<(String, Param<D, T>)>,
        bucket_bytes: usize,
        accumulated: bool,
    ) -> Self {
        let sizes: Vec<usize> = params.iter().map(|(_, p)| p.numel().saturating_mul(T::DTYPE.size())).collect();
        let mut buckets = Vec::new();
        let mut start = 0;
        for end in bucket_ends(&sizes, bucket_bytes) {
            buckets.push(start..end);
            start = end;
        }
        let index = params.iter().enumerate().map(|(i, (_, p))| (Arc::as_ptr(p.node()), i)).collect();
        let grads = params.iter().map(|(_, p)| if accumulated { p.grad() } else { None }).collect();
        Reducer { group, params, grads, index, buckets, started: Vec::new(), launched: 0 }
    }

    /// The pass has this leaf's gradient `g`: it joins its bucket, and the buckets that
    /// are complete from the next one to start on are started.
    fn ready(&mut self, leaf: &Arc<Node>, g: &Erased) -> Result<()> {
        let Some(&i) = self.index.get(&Arc::as_ptr(leaf)) else { return Ok(()) };
        let p = &self.params[i].1;
        let g: Tensor<D, T> = g.clone().typed(p.placement())?;
        self.grads[i] = Some(match p.grad() {
            Some(old) => (&old + &g)?,
            None => g,
        });
        while let Some(bucket) = self.buckets.get(self.started.len()) {
            if self.grads[bucket.clone()].iter().any(Option::is_none) {
                break;
            }
            self.start_next()?;
            self.launched += 1;
        }
        Ok(())
    }

    /// Starts the next bucket's exchange: its gradients flattened, zeros for those this
    /// rank has none of, and one more element, 1 if it lacked any.
    fn start_next(&mut self) -> Result<()> {
        let range = self.buckets[self.started.len()].clone();
        let at = self.params[range.start].1.placement();
        let mut flat = Vec::with_capacity(range.len() + 1);
        let mut missing = false;
        for i in range {
            let g = match &self.grads[i] {
                Some(g) => g.clone(),
                None => {
                    missing = true;
                    Tensor::zeros_on(at, self.params[i].1.shape())?
                }
            };
            flat.push(g.reshape([g.numel()])?);
        }
        flat.push(Tensor::full_on(at, [1], T::from_f64(if missing { 1.0 } else { 0.0 }))?);
        let flat = Tensor::concat(&flat.iter().collect::<Vec<_>>())?;
        self.started.push(self.group.all_reduce_async(&flat, ReduceOp::Avg)?);
        Ok(())
    }

    /// After the pass: the buckets not yet started, then every average written back, or
    /// an `Err` on every rank if any rank lacked a gradient.
    fn finish(&mut self) -> Result<()> {
        while self.started.len() < self.buckets.len() {
            self.start_next()?;
        }
        let mut averaged = Vec::with_capacity(self.buckets.len());
        let mut ranks_missing = false;
        for work in std::mem::take(&mut self.started) {
            let avg = work.wait()?;
            let n = avg.numel();
            ranks_missing |= avg.narrow(0, n - 1, 1)?.item()?.to_f64() != 0.0;
            averaged.push(avg);
        }
        if ranks_missing {
            let missing: Vec<&str> = self
                .params
                .iter()
                .zip(&self.grads)
                .filter(|(_, g)| g.is_none())
                .map(|((n, _), _)| n.as_str())
                .collect();
            let here = if missing.is_empty() {
                "none here".to_string()
            } else {
                format!("`{}` here (rank {})", missing.join("`, `"), self.group.rank())
            };
            return Err(Error::Dist {
                op: "DistributedDataParallel::backward",
                reason: format!(
                    "some rank has parameters that got no gradient in this pass ({here}); every parameter must \
                     take part in the loss on every rank, or be left out of the model"
                ),
            });
        }
        for (range, avg) in self.buckets.iter().zip(averaged) {
            let mut offset = 0;
            for (_, p) in &self.params[range.clone()] {
                let n = p.numel();
                p.set_grad(Some(avg.narrow(0, offset, n)?.reshape(p.shape())?))?;
                offset += n;
            }
        }
        Ok(())
    }
}
