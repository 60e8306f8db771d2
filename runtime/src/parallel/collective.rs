//! Collectives over one tensor per device: broadcast, all-reduce (sum), all-gather.
//!
//! On the cuda backend they run through NCCL when libnccl is installed and the devices
//! are two or more distinct GPUs; the host backend computes them in memory. Anywhere
//! else (no NCCL, one device, host placements, a device named twice) they are peer or
//! staged copies with the same results.

use super::lists::{DeviceList, Parts};
use super::scatter::{gather_dyn, nonempty, reduce_add_dyn, same_shapes};
use crate::backend::{self, Buffer, Collective};
use crate::device::{Device, DeviceId, Dyn};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::shape::{self, Shape};
use crate::tensor::Tensor;

/// A copy of `x` on every device of `devices` (PyTorch's `comm.broadcast`); `x` may
/// live anywhere, also on one of the devices.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::parallel::broadcast;
/// use locus::{Cpu, Cuda, DeviceId, Tensor};
/// # if !locus::testing::needs_devices(2)? { return Ok(()); }
/// let w = Tensor::<Cpu>::from_vec(vec![1.0, 2.0], [2])?;
/// let (a, b) = broadcast(&w, (Cuda::<0>, Cuda::<1>))?;
/// assert_eq!((a.to_vec()?, b.to_vec()?), (vec![1.0, 2.0], vec![1.0, 2.0]));
/// let copies = broadcast(&w, [DeviceId::Cuda(0), DeviceId::Cuda(1)])?;
/// assert_eq!(copies[1].device(), DeviceId::Cuda(1));
/// # Ok::<(), locus::Error>(())
/// ```
pub fn broadcast<D: Device, T: Element, L: DeviceList>(x: &Tensor<D, T>, devices: L) -> Result<L::Tensors<T>> {
    devices.place(broadcast_dyn(x, &devices.device_ids())?)
}

pub(crate) fn broadcast_dyn<D: Device, T: Element>(x: &Tensor<D, T>, ids: &[DeviceId]) -> Result<Vec<Tensor<Dyn, T>>> {
    if ids.is_empty() {
        return Err(Error::InvalidArgument { op: "broadcast", reason: "no devices to send to".into() });
    }
    if direct(ids, x.numel())? {
        let (root, src) = match ids.iter().position(|&d| d == x.device()) {
            Some(i) => (i, x.clone().into_dyn()),
            None => (0, x.to_dyn(ids[0])?),
        };
        let op = Collective::Broadcast { root, buf: src.buffer() };
        if let Some(bufs) = backend::for_device(ids[0])?.collective(ids, T::DTYPE, x.numel(), op)? {
            return wrap(ids, bufs, x.checked_shape());
        }
    }
    ids.iter().map(|&id| x.to_dyn(id)).collect()
}

/// The elementwise sum of all the tensors (one shape), on every tensor's device: NCCL's
/// all-reduce. The result has the shape of `parts`: a tuple for a tuple, a `Vec` for a
/// slice.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::parallel::all_reduce_sum;
/// use locus::{Cuda, Tensor};
/// # if !locus::testing::needs_devices(2)? { return Ok(()); }
/// let grads = (Tensor::<Cuda<0>>::full([3], 1.0)?, Tensor::<Cuda<1>>::full([3], 2.0)?);
/// let (g0, g1) = all_reduce_sum(&grads)?;
/// assert_eq!(g0.to_vec()?, vec![3.0; 3]);
/// assert_eq!(g1.to_vec()?, vec![3.0; 3]);
/// # Ok::<(), locus::Error>(())
/// ```
pub fn all_reduce_sum<P: Parts + ?Sized>(parts: &P) -> Result<P::Owned> {
    let ps = parts.tensors();
    same_shapes("all_reduce_sum", &ps)?;
    let ids: Vec<DeviceId> = ps.iter().map(|p| p.device()).collect();
    let len = ps[0].numel();
    if direct(&ids, len)? {
        let bufs: Vec<&Buffer> = ps.iter().map(|p| p.buffer()).collect();
        let op = Collective::AllReduceSum(&bufs);
        if let Some(out) = backend::for_device(ids[0])?.collective(&ids, P::Elem::DTYPE, len, op)? {
            return parts.same_places(wrap(&ids, out, ps[0].checked_shape())?);
        }
    }
    let total = reduce_add_dyn(&ps, Dyn::new(ids[0]))?;
    parts.same_places(ids.iter().map(|&id| total.to_dyn(id)).collect::<Result<_>>()?)
}

/// All the tensors one after another along dim 0, on every tensor's device: NCCL's
/// all-gather. Row counts may differ; the other dims must agree.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::parallel::all_gather;
/// use locus::{Cuda, Tensor};
/// # if !locus::testing::needs_devices(2)? { return Ok(()); }
/// let parts = vec![Tensor::<Cuda<0>, i32>::full([1], 7)?.into_dyn(), Tensor::<Cuda<1>, i32>::full([2], 8)?.into_dyn()];
/// let all = all_gather(&parts)?;
/// assert_eq!(all[0].to_vec()?, vec![7, 8, 8]);
/// assert_eq!(all[1].to_vec()?, vec![7, 8, 8]);
/// # Ok::<(), locus::Error>(())
/// ```
pub fn all_gather<P: Parts + ?Sized>(parts: &P) -> Result<P::Owned> {
    let ps = parts.tensors();
    let ids: Vec<DeviceId> = ps.iter().map(|p| p.device()).collect();
    let first = nonempty("all_gather", &ps)?;
    let equal = ps.iter().all(|p| p.shape() == first.shape());
    if equal && first.rank() > 0 && direct(&ids, first.numel())? {
        // Each device receives every input: check that result before the backend sizes it.
        let mut shape = first.shape().to_vec();
        shape[0] = shape::mul("all_gather", shape[0], ps.len())?;
        let inputs: Vec<&[usize]> = ps.iter().map(|p| p.shape()).collect();
        let shape = Shape::result("all_gather", shape, P::Elem::DTYPE, &inputs)?;
        let bufs: Vec<&Buffer> = ps.iter().map(|p| p.buffer()).collect();
        let op = Collective::AllGather(&bufs);
        if let Some(out) = backend::for_device(ids[0])?.collective(&ids, P::Elem::DTYPE, first.numel(), op)? {
            return parts.same_places(wrap(&ids, out, &shape)?);
        }
    }
    let total = gather_dyn(&ps, Dyn::new(ids[0]))?;
    parts.same_places(ids.iter().map(|&id| total.to_dyn(id)).collect::<Result<_>>()?)
}

/// Whether the backend may run a collective over `ids` itself: two or more distinct CUDA
/// devices (which must exist) and some data.
fn direct(ids: &[DeviceId], len: usize) -> Result<bool> {
    if ids.len() < 2 || len == 0 || ids.iter().any(|d| d.ordinal().is_none()) {
        return Ok(false);
    }
    for &id in ids {
        backend::for_device(id)?;
    }
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    Ok(sorted.len() == ids.len())
}

/// Backend outputs as tensors of `shape`, one per device.
fn wrap<T: Element>(ids: &[DeviceId], bufs: Vec<Buffer>, shape: &Shape) -> Result<Vec<Tensor<Dyn, T>>> {
    if bufs.len() != ids.len() {
        return Err(Error::InvalidArgument {
            op: "collective",
            reason: "the backend gave the wrong number of outputs".into(),
        });
    }
    Ok(ids.iter().zip(bufs).map(|(&id, buf)| Tensor::from_buffer(Dyn::new(id), buf, shape.clone())).collect())
}
