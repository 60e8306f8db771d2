//! `DistributedDataParallel`: one process per device, each with a full copy of the model
//! and its share of every batch (PyTorch's `nn.parallel.DistributedDataParallel`). The
//! parameters are broadcast from rank 0 when it is made, so every rank starts equal;
//! `backward` runs the local backward pass, then averages every gradient over the ranks
//! in buckets (`all_reduce_avg_bucketed`, 25 MiB by default, in reverse registration
//! order, as PyTorch lays them out), so every rank takes the same step and the weights
//! stay bit-identical. Not yet: overlapping the exchange with the backward pass (the
//! buckets are exchanged once it has finished).

use crate::autograd::Param;
use crate::device::Device;
use crate::element::Float;
use crate::error::{Error, Result};
use crate::nn::Parameters;
use crate::tensor::Tensor;

use super::{all_reduce_avg_bucketed, ProcessGroup, ReduceOp, DEFAULT_BUCKET_BYTES};

/// A model whose gradients are averaged over the ranks of a [`ProcessGroup`].
///
/// A parameter that gets no gradient on some rank (PyTorch's `find_unused_parameters`
/// trap, which hangs there) is an `Err` naming it, on every rank, after one small
/// exchange: no rank waits for a bucket another will not send.
pub struct DistributedDataParallel<'g, M> {
    module: M,
    group: &'g ProcessGroup,
    bucket_bytes: usize,
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
        Ok(DistributedDataParallel { module, group, bucket_bytes: DEFAULT_BUCKET_BYTES })
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

    /// The local backward pass of `loss`, then every parameter's gradient averaged over
    /// the ranks.
    pub fn backward<D: Device, T: Float>(&mut self, loss: &Tensor<D, T>) -> Result<()>
    where
        M: Parameters<D, T>,
    {
        loss.backward()?;
        self.average_gradients()
    }

    /// Averages every parameter's gradient over the ranks (what `backward` ends with).
    pub fn average_gradients<D: Device, T: Float>(&mut self) -> Result<()>
    where
        M: Parameters<D, T>,
    {
        let mut params: Vec<(String, Param<D, T>)> = Vec::new();
        self.module.visit_params("", &mut |name, p| params.push((name.to_string(), p.clone())));
        // Reverse registration order, as PyTorch's buckets: the last layers' gradients are
        // the first backward makes.
        params.reverse();
        let missing: Vec<&str> = params.iter().filter(|(_, p)| p.grad().is_none()).map(|(n, _)| n.as_str()).collect();
        // One small exchange first: how many ranks miss a gradient. Every rank learns it, so
        // either all exchange the buckets or none does.
        let at = match params.first() {
            Some((_, p)) => p.placement(),
            None => return Ok(()),
        };
        let flag = Tensor::<D, f32>::full_on(at, [1], if missing.is_empty() { 0.0 } else { 1.0 })?;
        let ranks_missing = self.group.all_reduce(&flag, ReduceOp::Sum)?.item()?;
        if ranks_missing > 0.0 {
            let here = if missing.is_empty() {
                "none here".to_string()
            } else {
                format!("`{}` here (rank {})", missing.join("`, `"), self.group.rank())
            };
            return Err(Error::Dist {
                op: "DistributedDataParallel::backward",
                reason: format!(
                    "{ranks_missing} rank(s) have parameters that got no gradient in this pass ({here}); \
                     every parameter must take part in the loss on every rank, or be left out of the model"
                ),
            });
        }
        let mut grads: Vec<Tensor<D, T>> = params.iter().filter_map(|(_, p)| p.grad()).collect();
        let mut refs: Vec<&mut Tensor<D, T>> = grads.iter_mut().collect();
        all_reduce_avg_bucketed(self.group, &mut refs, self.bucket_bytes)?;
        for ((_, p), g) in params.iter().zip(grads) {
            p.set_grad(Some(g))?;
        }
        Ok(())
    }
}
