//! The row ops of [`Buffer`]: softmax and its gradient, LayerNorm and its gradients, and
//! cross-entropy's loss per row, each matched once to its backend.

use crate::backend::api::traits::BackendStorage;
use crate::backend::dispatch::buffer::{Buffer, Many, Pair};
use crate::backend::dispatch::capture;
use crate::backend::{Norm, NormGrads, SoftmaxOp};
use crate::element::DType;
use crate::error::Result;
use crate::shape::Reduction;

/// The weight and the bias, when `v` holds both.
fn affine<'a, S>(v: &[&'a S]) -> Option<(&'a S, &'a S)> {
    match v {
        [w, b] => Some((w, b)),
        _ => None,
    }
}

/// A backend's LayerNorm gradients as buffers.
fn wrap<S>((dx, params): NormGrads<S>, f: fn(S) -> Buffer) -> NormGrads<Buffer> {
    (f(dx), params.map(|(dw, db)| (f(dw), f(db))))
}

impl Buffer {
    /// [`BackendStorage::softmax`]: `op` over the dim `r` describes, or with `grad` (this
    /// buffer being its output) the gradient of its input.
    pub(crate) fn softmax(&self, grad: Option<&Buffer>, op: SoftmaxOp, dtype: DType, r: Reduction) -> Result<Buffer> {
        capture::on_device(op.name(), self.device_id())?;
        match (self, grad.map(|g| self.pair(op.name(), g)).transpose()?) {
            (_, Some(Pair::Host(y, g))) => y.softmax(Some(g), op, dtype, r).map(Buffer::host),
            (_, Some(Pair::Cuda(y, g))) => y.softmax(Some(g), op, dtype, r).map(Buffer::Cuda),
            (Buffer::Host(h), None) => h.softmax(None, op, dtype, r).map(Buffer::host),
            (Buffer::Cuda(c), None) => c.softmax(None, op, dtype, r).map(Buffer::Cuda),
        }
    }

    /// [`BackendStorage::layer_norm`]: the normalised rows, times the weight plus the bias
    /// of `affine` when given.
    pub(crate) fn layer_norm(&self, affine_of: Option<(&Buffer, &Buffer)>, dtype: DType, n: Norm) -> Result<Buffer> {
        capture::on_device("layer_norm", self.device_id())?;
        match self.many("layer_norm", affine_of.into_iter().flat_map(|(w, b)| [w, b]))? {
            Many::Host(x, v) => x.layer_norm(affine(&v), dtype, n).map(Buffer::host),
            Many::Cuda(x, v) => x.layer_norm(affine(&v), dtype, n).map(Buffer::Cuda),
        }
    }

    /// [`BackendStorage::layer_norm_back`]: the gradients of [`layer_norm`](Self::layer_norm)
    /// at this buffer given `grad`; with the forward's `weight`, the weight's and bias's too.
    pub(crate) fn layer_norm_back(
        &self,
        grad: &Buffer,
        weight: Option<&Buffer>,
        dtype: DType,
        n: Norm,
    ) -> Result<NormGrads<Buffer>> {
        capture::on_device("layer_norm", self.device_id())?;
        match self.many("layer_norm", std::iter::once(grad).chain(weight))? {
            Many::Host(x, v) => x.layer_norm_back(v[0], v.get(1).copied(), dtype, n).map(|g| wrap(g, Buffer::host)),
            Many::Cuda(x, v) => x.layer_norm_back(v[0], v.get(1).copied(), dtype, n).map(|g| wrap(g, Buffer::Cuda)),
        }
    }

    /// [`BackendStorage::cross_entropy_rows`]: each row's loss against its target.
    pub(crate) fn cross_entropy_rows(
        &self,
        targets: &Buffer,
        dtype: DType,
        rows: usize,
        classes: usize,
    ) -> Result<Buffer> {
        capture::on_device("cross_entropy", self.device_id())?;
        match self.pair("cross_entropy", targets)? {
            Pair::Host(a, b) => a.cross_entropy_rows(b, dtype, rows, classes).map(Buffer::host),
            Pair::Cuda(a, b) => a.cross_entropy_rows(b, dtype, rows, classes).map(Buffer::Cuda),
        }
    }

    /// [`BackendStorage::cross_entropy_back`]: the logits' gradient given each row's
    /// loss's gradient `grad`.
    pub(crate) fn cross_entropy_back(
        &self,
        targets: &Buffer,
        grad: &Buffer,
        dtype: DType,
        rows: usize,
        classes: usize,
    ) -> Result<Buffer> {
        capture::on_device("cross_entropy", self.device_id())?;
        match self.many("cross_entropy", [targets, grad])? {
            Many::Host(x, v) => x.cross_entropy_back(v[0], v[1], dtype, rows, classes).map(Buffer::host),
            Many::Cuda(x, v) => x.cross_entropy_back(v[0], v[1], dtype, rows, classes).map(Buffer::Cuda),
        }
    }
}
