//! Splitting a batch over devices and joining the pieces again (`torch.cuda.comm`'s
//! `scatter`, `gather` and `reduce_add`), built from copies between devices.

use super::lists::{DeviceList, Parts};

use crate::device::{Device, DeviceId, Dyn};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::shape::{self, Shape};
use crate::tensor::Tensor;

/// The row counts [`scatter`] gives `n` devices for `len` rows: as even as possible, the
/// first `len % n` devices one row more. `n == 0` gives no sizes.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::parallel::chunk_sizes;
/// assert_eq!(chunk_sizes(10, 4), vec![3, 3, 2, 2]);
/// assert_eq!(chunk_sizes(2, 3), vec![1, 1, 0]);
/// assert_eq!(chunk_sizes(5, 0), Vec::<usize>::new());
/// ```
pub fn chunk_sizes(len: usize, n: usize) -> Vec<usize> {
    if n == 0 {
        return Vec::new();
    }
    (0..n).map(|i| len / n + usize::from(i < len % n)).collect()
}

/// Splits `x` along dim 0 over `devices`, as evenly as possible (see [`chunk_sizes`]): a
/// device may get zero rows when there are fewer rows than devices.
///
/// `devices` is a tuple of placements (the result is a tuple of typed tensors) or
/// `DeviceId`s (the result is `Tensor<Dyn>`s).
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::parallel::scatter;
/// use locus::{Cpu, Cuda, DeviceId, Tensor};
/// # if !locus::testing::needs_devices(2)? { return Ok(()); }
/// let x = Tensor::<Cpu, i32>::arange(0, 10, 1)?.reshape([5, 2])?;
/// let (a, b) = scatter(&x, (Cuda::<0>, Cuda::<1>))?;
/// assert_eq!(a.to_vec()?, vec![0, 1, 2, 3, 4, 5]);
/// assert_eq!(b.shape(), &[2, 2]);
/// let parts = scatter(&x, &[DeviceId::Cuda(1), DeviceId::Cuda(0)][..])?;
/// assert_eq!(parts[0].device(), DeviceId::Cuda(1));
/// # Ok::<(), locus::Error>(())
/// ```
pub fn scatter<D: Device, T: Element, L: DeviceList>(x: &Tensor<D, T>, devices: L) -> Result<L::Tensors<T>> {
    let ids = devices.device_ids();
    let rows = rows_of("scatter", x)?;
    let sizes = chunk_sizes(rows, ids.len());
    devices.place(split_to("scatter", x, &ids, &sizes)?)
}

/// Splits `x` along dim 0 over `devices`, `sizes[i]` rows to device `i`; the sizes must
/// add up to the row count (PyTorch's `chunk_sizes`).
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::parallel::scatter_sizes;
/// use locus::{Cuda, Tensor};
/// # if !locus::testing::needs_devices(2)? { return Ok(()); }
/// let x = Tensor::<Cuda<0>>::arange(0.0, 4.0, 1.0)?;
/// let (a, b) = scatter_sizes(&x, (Cuda::<0>, Cuda::<1>), &[1, 3])?;
/// assert_eq!((a.to_vec()?, b.to_vec()?), (vec![0.0], vec![1.0, 2.0, 3.0]));
/// assert!(scatter_sizes(&x, (Cuda::<0>, Cuda::<1>), &[1, 2]).is_err());
/// # Ok::<(), locus::Error>(())
/// ```
pub fn scatter_sizes<D: Device, T: Element, L: DeviceList>(
    x: &Tensor<D, T>,
    devices: L,
    sizes: &[usize],
) -> Result<L::Tensors<T>> {
    devices.place(split_to("scatter", x, &devices.device_ids(), sizes)?)
}

/// The rows of `x` split by `sizes`, each copied to its device (shared, not copied, where
/// the rows already live there).
pub(crate) fn split_to<D: Device, T: Element>(
    op: &'static str,
    x: &Tensor<D, T>,
    ids: &[DeviceId],
    sizes: &[usize],
) -> Result<Vec<Tensor<Dyn, T>>> {
    if ids.is_empty() {
        return Err(Error::InvalidArgument { op, reason: "no devices to send to".into() });
    }
    let rows = rows_of(op, x)?;
    if sizes.len() != ids.len() || sizes.iter().try_fold(0usize, |a, &s| a.checked_add(s)) != Some(rows) {
        return Err(Error::InvalidArgument {
            op,
            reason: format!("sizes {sizes:?} for {} devices do not split {rows} rows", ids.len()),
        });
    }
    if sizes.len() == 1 {
        return Ok(vec![x.to_dyn(ids[0])?]);
    }
    if x.tracks_grad() {
        // Recorded views, so that the parts' gradients reach `x`.
        let mut start = 0;
        let mut out = Vec::with_capacity(ids.len());
        for (&id, &n) in ids.iter().zip(sizes) {
            out.push(x.narrow(0, start, n)?.to_dyn(id)?);
            start += n;
        }
        return Ok(out);
    }
    let row = shape::product(op, &x.shape()[1..])?;
    let mut start = 0;
    let mut out = Vec::with_capacity(ids.len());
    for (&id, &n) in ids.iter().zip(sizes) {
        let mut shape = x.shape().to_vec();
        shape[0] = n;
        let shape = Shape::new(op, shape, T::DTYPE)?;
        let buf = x.buffer().slice(T::DTYPE, shape::mul(op, start, row)?, shape.numel())?;
        out.push(x.with_buffer(buf, shape).to_dyn(id)?);
        start += n;
    }
    Ok(out)
}

fn rows_of<D: Device, T: Element>(op: &'static str, x: &Tensor<D, T>) -> Result<usize> {
    x.shape().first().copied().ok_or_else(|| Error::InvalidArgument { op, reason: "a 0-d tensor has no dim 0".into() })
}

/// The tensors one after another along dim 0, on `out` (PyTorch's `gather`); their
/// other dims must agree.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::parallel::gather;
/// use locus::{Cpu, Cuda, Tensor};
/// # if !locus::testing::needs_devices(2)? { return Ok(()); }
/// let parts = (Tensor::<Cuda<0>>::ones([1, 2])?, Tensor::<Cuda<1>>::zeros([2, 2])?);
/// let all = gather(&parts, Cpu)?;
/// assert_eq!(all.shape(), &[3, 2]);
/// assert_eq!(all.to_vec()?, vec![1.0, 1.0, 0.0, 0.0, 0.0, 0.0]);
/// # Ok::<(), locus::Error>(())
/// ```
pub fn gather<P: Parts + ?Sized, O: Device>(parts: &P, out: O) -> Result<Tensor<O, P::Elem>> {
    gather_dyn(&parts.tensors(), out)
}

pub(crate) fn gather_dyn<T: Element, O: Device>(parts: &[Tensor<Dyn, T>], out: O) -> Result<Tensor<O, T>> {
    let first = nonempty("gather", parts)?;
    for p in parts {
        if p.rank() == 0 || p.shape()[1..] != first.shape()[1..] {
            return Err(Error::ShapeMismatch { op: "gather", lhs: first.shape().to_vec(), rhs: p.shape().to_vec() });
        }
    }
    if parts.len() == 1 {
        return first.copy_to(out);
    }
    let moved = parts.iter().map(|p| p.copy_to(out)).collect::<Result<Vec<_>>>()?;
    Tensor::concat(&moved.iter().collect::<Vec<_>>())
}

/// The elementwise sum of tensors of one shape, on `out` (PyTorch's `reduce_add`).
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::parallel::reduce_add;
/// use locus::{Cuda, Tensor};
/// # if !locus::testing::needs_devices(2)? { return Ok(()); }
/// let parts = [Tensor::<Cuda<0>>::full([2], 1.0)?.into_dyn(), Tensor::<Cuda<1>>::full([2], 2.0)?.into_dyn()];
/// assert_eq!(reduce_add(&parts, Cuda::<1>)?.to_vec()?, vec![3.0, 3.0]);
/// # Ok::<(), locus::Error>(())
/// ```
pub fn reduce_add<P: Parts + ?Sized, O: Device>(parts: &P, out: O) -> Result<Tensor<O, P::Elem>> {
    reduce_add_dyn(&parts.tensors(), out)
}

pub(crate) fn reduce_add_dyn<T: Element, O: Device>(parts: &[Tensor<Dyn, T>], out: O) -> Result<Tensor<O, T>> {
    same_shapes("reduce_add", parts)?;
    let mut acc = parts[0].copy_to(out)?;
    for p in &parts[1..] {
        acc = (&acc + &p.copy_to(out)?)?;
    }
    Ok(acc)
}

pub(crate) fn nonempty<'a, T: Element>(op: &'static str, parts: &'a [Tensor<Dyn, T>]) -> Result<&'a Tensor<Dyn, T>> {
    parts.first().ok_or_else(|| Error::InvalidArgument { op, reason: "no tensors given".into() })
}

/// Checks that there is at least one tensor and that all have the first one's shape.
pub(crate) fn same_shapes<T: Element>(op: &'static str, parts: &[Tensor<Dyn, T>]) -> Result<()> {
    let first = nonempty(op, parts)?;
    match parts.iter().find(|p| p.shape() != first.shape()) {
        Some(p) => Err(Error::ShapeMismatch { op, lhs: first.shape().to_vec(), rhs: p.shape().to_vec() }),
        None => Ok(()),
    }
}
