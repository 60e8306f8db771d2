//! `Tensor<D, T>`: a contiguous n-dimensional array of `T` on placement `D`.

mod activation;
mod arith;
mod compare;
mod convert;
mod current;
mod debug;
mod elementwise;
mod factory;
mod index_select;
mod layout;
mod matrix;
#[cfg(feature = "ndarray")]
mod ndarray;
mod one_hot;
mod reduce_dim;
mod softmax;
mod squeeze;

use std::marker::PhantomData;
use std::sync::Arc;

use crate::autograd::Node;
use crate::backend::{self, Buffer};
use crate::device::{Device, DeviceId, Dyn, StaticDevice};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::shape::Shape;
use crate::storage::Storage;

/// A contiguous, row-major n-dimensional array of `T` whose placement is the type `D`.
///
/// Ops take their operands' placement and return `Result`: ops of two tensors on
/// different static placements do not compile, and everything that can fail at run
/// time (shapes, memory, a missing device) is an `Err`.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Cuda, Tensor};
/// let x = Tensor::<Cuda<0>>::from_vec(vec![1.0, 2.0, 3.0, 4.0], [2, 2])?;
/// let y = (&x * 2.0)?;
/// assert_eq!(y.to_vec()?, vec![2.0, 4.0, 6.0, 8.0]);
/// assert_eq!(y.shape(), &[2, 2]);
/// assert_eq!(y.device().to_string(), "cuda:0");
/// # Ok::<(), locus::Error>(())
/// ```
pub struct Tensor<D: Device, T: Element = f32> {
    storage: Arc<Storage>,
    shape: Shape,
    placement: D,
    _elem: PhantomData<T>,
    /// The autograd node of this value: `Some` for a parameter and for the result of an
    /// op on tensors that track gradients (docs/DESIGN.md, section 5c).
    grad_fn: Option<Arc<Node>>,
}

/// A tensor with its placement and element type erased: the gradients flowing along the
/// tape's edges, whose types each rule restores with [`Erased::typed`].
#[derive(Clone)]
pub(crate) struct Erased {
    storage: Arc<Storage>,
    shape: Shape,
}

impl Erased {
    /// The tensor on `placement` with elements `T`; the tape guarantees both, and a
    /// mismatch is an internal error, not a reinterpretation.
    pub(crate) fn typed<D: Device, T: Element>(self, placement: D) -> Result<Tensor<D, T>> {
        if self.storage.dtype != T::DTYPE || self.storage.device != placement.id() {
            return Err(Error::InvalidArgument {
                op: "backward",
                reason: format!(
                    "internal: a gradient of {} on {} where {} on {} was expected",
                    self.storage.dtype,
                    self.storage.device,
                    T::DTYPE,
                    placement.id()
                ),
            });
        }
        Ok(Tensor { storage: self.storage, shape: self.shape, placement, _elem: PhantomData, grad_fn: None })
    }

    pub(crate) fn device(&self) -> DeviceId {
        self.storage.device
    }

    pub(crate) fn dtype(&self) -> crate::element::DType {
        self.storage.dtype
    }

    pub(crate) fn shape(&self) -> &[usize] {
        &self.shape
    }
}

impl<D: Device, T: Element> Clone for Tensor<D, T> {
    /// Shares the storage: tensors are immutable, so a clone is as good as a copy.
    fn clone(&self) -> Self {
        Tensor {
            storage: Arc::clone(&self.storage),
            shape: self.shape.clone(),
            placement: self.placement,
            _elem: PhantomData,
            grad_fn: self.grad_fn.clone(),
        }
    }
}

impl<D: Device, T: Element> Tensor<D, T> {
    /// A tensor of `shape` over `buf`, a buffer on `placement` of the shape's element count.
    pub(crate) fn from_buffer(placement: D, buf: Buffer, shape: Shape) -> Self {
        let storage = Storage::new(buf, placement.id(), T::DTYPE, shape.numel());
        Tensor { storage: Arc::new(storage), shape, placement, _elem: PhantomData, grad_fn: None }
    }

    /// A tensor of `shape` over a new buffer on this tensor's device.
    pub(crate) fn with_buffer(&self, buf: Buffer, shape: Shape) -> Self {
        Self::from_buffer(self.placement, buf, shape)
    }

    /// The shape with its checked element count.
    pub(crate) fn checked_shape(&self) -> &Shape {
        &self.shape
    }

    pub(crate) fn buffer(&self) -> &Buffer {
        &self.storage.buf
    }

    /// The buffer, for an op about to be queued on this tensor's device: an `Err` where
    /// `on_stream` made a stream of another device current and none of this one (the op
    /// would run on this device's default stream, not the one the caller chose).
    pub(crate) fn queued(&self, op: &'static str) -> Result<&Buffer> {
        crate::stream::check_op_stream(op, self.device())?;
        Ok(&self.storage.buf)
    }

    pub(crate) fn storage(&self) -> &Storage {
        &self.storage
    }

    /// The storage, for `op` to write in place (after a copy where it is shared). A
    /// tensor that tracks gradients records the write: ops that read it before make
    /// their backward an error, and so does a backward pass through the value written.
    pub(crate) fn storage_mut(&mut self, op: &'static str) -> &mut Arc<Storage> {
        if let Some(node) = &self.grad_fn {
            node.bump(op);
            if !node.is_leaf() && !node.is_written() {
                self.grad_fn = Some(Node::written(op, node));
            }
        }
        &mut self.storage
    }

    /// This tensor over `storage`, a copy of its own storage's values (no write: its
    /// autograd node stays).
    pub(crate) fn replace_storage(&mut self, storage: Arc<Storage>) {
        debug_assert_eq!(storage.len, self.storage.len);
        self.storage = storage;
    }

    /// Gives this tensor memory of its own if it shares it (a copy of the same values: no
    /// write, so its autograd node stays), as a write in place needs.
    pub(crate) fn own_memory(&mut self) -> crate::error::Result<()> {
        if Arc::strong_count(&self.storage) > 1 {
            let copy = self.storage().copy_to(self.device())?;
            self.replace_storage(Arc::new(copy));
        }
        Ok(())
    }

    /// The autograd node, if this tensor tracks gradients.
    pub(crate) fn grad_fn(&self) -> Option<&Arc<Node>> {
        self.grad_fn.as_ref()
    }

    /// This tensor with `node` as its autograd node.
    pub(crate) fn with_grad_fn(mut self, node: Option<Arc<Node>>) -> Self {
        self.grad_fn = node;
        self
    }

    /// The value with its placement and element type erased, and no autograd node.
    pub(crate) fn erase(self) -> Erased {
        Erased { storage: self.storage, shape: self.shape }
    }

    pub(crate) fn shared_storage(&self) -> &Arc<Storage> {
        &self.storage
    }

    /// This tensor's shape over `storage`, which holds its elements on `placement`.
    pub(crate) fn over_storage<E: Device>(&self, placement: E, storage: Arc<Storage>) -> Tensor<E, T> {
        debug_assert_eq!(storage.device, placement.id());
        debug_assert_eq!(storage.dtype, T::DTYPE);
        Tensor { storage, shape: self.shape.clone(), placement, _elem: PhantomData, grad_fn: None }
    }

    /// The dims, outermost first. A scalar (0-d) tensor has none.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The number of dims.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.shape.numel()
    }

    /// Where the data lives, as a run-time name.
    pub fn device(&self) -> DeviceId {
        self.placement.id()
    }

    /// The placement value (zero-sized for static placements).
    pub fn placement(&self) -> D {
        self.placement
    }

    /// The elements in row-major order, copied to the host.
    ///
    /// From a device this is a download straight into a new `Vec`, by the same path as
    /// [`Tensor::to`]`::<Cpu>()` and [`Tensor::item`] of the same size: below 256 KiB one
    /// copy that the driver stages, to 2 MiB pieces through one pinned block on this
    /// thread (each piece's DMA overlapping the copy out of the one before), from 2 MiB
    /// the copy threads through pinned stages (thresholds chosen from the GPU bench's `d2h_pageable_*` rows; docs/DESIGN.md,
    /// section 5). Going through a cached host block first would not help: the `Vec`'s
    /// pages are written once either way, and the detour adds a copy.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu, i32>::arange(0, 4, 1)?;
    /// assert_eq!(t.to_vec()?, vec![0, 1, 2, 3]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn to_vec(&self) -> Result<Vec<T>> {
        // Straight into the new vector's capacity, not zeroed first: zeroing would cost as
        // much as the copy where the allocator hands back reused memory (issue 35).
        let n = self.numel();
        let mut out: Vec<T> = Vec::with_capacity(n);
        let spare = out.spare_capacity_mut();
        let (bytes, at) = (std::mem::size_of_val(spare), spare.as_mut_ptr().cast::<std::mem::MaybeUninit<u8>>());
        // The capacity holds at least `n` elements of `T`, `bytes` bytes in all, borrowed
        // mutably here; `MaybeUninit<u8>` has no alignment or validity to keep.
        // SAFETY: as said just above.
        let raw = unsafe { std::slice::from_raw_parts_mut(at, bytes) };
        self.storage.read_into_uninit(&mut raw[..n * std::mem::size_of::<T>()])?;
        // The download wrote every byte of the first `n` elements (its `Ok`): the bytes of
        // this tensor's `n` elements of `T` (plain old data, `bytemuck::Pod`).
        // SAFETY: as said just above.
        unsafe { out.set_len(n) };
        Ok(out)
    }

    /// The elements in row-major order, copied into `out` (the host memory of the
    /// caller's, reused from call to call: PyTorch's `out.copy_(t)` into a CPU tensor), by
    /// the same paths as [`Tensor::to_vec`]. `out` must hold exactly [`Tensor::numel`]
    /// elements.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let t = Tensor::<Cuda<0>, i32>::arange(0, 4, 1)?;
    /// let mut out = [0; 4];
    /// t.copy_to_slice(&mut out)?;
    /// assert_eq!(out, [0, 1, 2, 3]);
    /// assert!(t.copy_to_slice(&mut [0; 3]).is_err());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn copy_to_slice(&self, out: &mut [T]) -> Result<()> {
        if out.len() != self.numel() {
            return Err(Error::InvalidArgument {
                op: "copy_to_slice",
                reason: format!(
                    "the slice holds {} elements and the tensor of shape {:?} has {}",
                    out.len(),
                    self.shape(),
                    self.numel()
                ),
            });
        }
        self.storage.read_into(bytemuck::cast_slice_mut(out))
    }

    /// The one element of a tensor with exactly one element.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let t = Tensor::<Cuda<0>>::ones([3])?;
    /// assert_eq!(t.sum()?.item()?, 3.0);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn item(&self) -> Result<T> {
        if self.numel() != 1 {
            return Err(Error::InvalidArgument {
                op: "item",
                reason: format!("a tensor of shape {:?} has {} elements, not one", self.shape(), self.numel()),
            });
        }
        // Straight into a value on the stack: no heap allocation for one element.
        let mut one = [T::ZERO];
        self.storage.read_into(bytemuck::cast_slice_mut(&mut one))?;
        Ok(one[0])
    }

    /// The same elements under another shape with the same element count (no copy).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu>::zeros([2, 3])?.reshape([3, 2])?;
    /// assert_eq!(t.shape(), &[3, 2]);
    /// assert!(t.reshape([4]).is_err());
    /// assert!(Tensor::<Cpu>::zeros([0])?.reshape([0, usize::MAX, 2]).is_err());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn reshape(&self, shape: impl AsRef<[usize]>) -> Result<Self> {
        let shape = Shape::new("reshape", shape.as_ref(), T::DTYPE)?;
        if shape.numel() != self.numel() {
            return Err(Error::InvalidArgument {
                op: "reshape",
                reason: format!(
                    "shape {:?} has {} elements, but the tensor of shape {:?} has {}",
                    &*shape,
                    shape.numel(),
                    &*self.shape,
                    self.numel()
                ),
            });
        }
        let out = Tensor { shape, grad_fn: None, ..self.clone() };
        Ok(self.track1(out, "reshape", |_| {
            let from = self.shape.clone();
            move |g: Tensor<_, _>| g.reshape(&*from)
        }))
    }

    /// A copy on placement `E`: the one op that crosses placements (PyTorch's `copy_`).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Cuda, Tensor};
    /// let a = Tensor::<Cpu>::ones([2])?;
    /// let b = a.to::<Cuda<0>>()?;
    /// assert_eq!(b.to::<Cpu>()?.to_vec()?, vec![1.0, 1.0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn to<E: StaticDevice>(&self) -> Result<Tensor<E, T>> {
        self.copy_to(E::resolve()?)
    }

    /// A copy on the run-time placement `id`.
    pub fn to_dyn(&self, id: DeviceId) -> Result<Tensor<Dyn, T>> {
        self.copy_to(Dyn::new(id))
    }

    pub(crate) fn copy_to<E: Device>(&self, dst: E) -> Result<Tensor<E, T>> {
        let storage = if dst.id() == self.device() {
            // Same memory: share it rather than copy, as torch's `.to` does.
            backend::for_device(dst.id())?;
            Arc::clone(&self.storage)
        } else {
            Arc::new(self.storage.copy_to(dst.id())?)
        };
        let out = Tensor { storage, shape: self.shape.clone(), placement: dst, _elem: PhantomData, grad_fn: None };
        // The gradient of a copy flows back to the source's placement (typed both ways).
        let src = self.placement;
        Ok(self.track1(out, "to", |_| move |g: Tensor<_, _>| g.copy_to(src)))
    }

    /// The same tensor with its placement checked at run time from now on (no copy).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let d = Tensor::<Cuda<0>>::zeros([2])?.into_dyn();
    /// assert_eq!(d.device().to_string(), "cuda:0");
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn into_dyn(self) -> Tensor<Dyn, T> {
        let placement = Dyn::new(self.device());
        Tensor { storage: self.storage, shape: self.shape, placement, _elem: PhantomData, grad_fn: self.grad_fn }
    }

    /// Checks that the operands share a placement at run time (always true for two
    /// static placements, which the type system has already matched).
    pub(crate) fn same_device<E: Device>(&self, op: &'static str, rhs: &Tensor<E, T>) -> Result<()> {
        self.same_device_as(op, rhs.device())
    }

    pub(crate) fn same_device_as(&self, op: &'static str, other: DeviceId) -> Result<()> {
        if self.device() == other {
            Ok(())
        } else {
            Err(Error::DeviceMismatch { op, lhs: self.device(), rhs: other })
        }
    }

    pub(super) fn check_dim(&self, op: &'static str, dim: usize) -> Result<()> {
        if dim >= self.rank() {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("dim {dim} is out of range for a tensor of shape {:?}", self.shape()),
            });
        }
        Ok(())
    }
}
