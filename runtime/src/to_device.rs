//! Moving whole values between placements: PyTorch's `module.to(device)`; and the copy
//! cache that lets a repeated move copy only the tensors that changed since the last.

use std::cell::RefCell;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::device::{Device, DeviceId, Dyn, StaticDevice};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::storage::{ContentsId, Storage};
use crate::tensor::Tensor;

/// A value whose tensors can be copied to another placement as a whole, giving the
/// same value on placement `E` (`Self::On<E>`).
///
/// `#[derive(ToDevice)]` implements it for structs generic over one `D: Device`; it is
/// implemented here for tensors, `PhantomData` of a placement, and `Vec`s, `Option`s,
/// `Box`es and arrays of `ToDevice` values.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Cpu, Cuda, Tensor, ToDevice};
/// let layers = vec![Tensor::<Cpu>::ones([2])?, Tensor::<Cpu>::zeros([3])?];
/// let moved: Vec<Tensor<Cuda<0>>> = layers.to::<Cuda<0>>()?;
/// assert_eq!(moved[0].to_vec()?, vec![1.0, 1.0]);
/// assert_eq!(moved[1].device().to_string(), "cuda:0");
/// # Ok::<(), locus::Error>(())
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be moved between devices",
    label = "this field mentions the device parameter but is not `ToDevice`",
    note = "`#[derive(ToDevice)]` copies the fields that mention the device parameter: tensors, `ToDevice` types, and `Vec`, `Option`, `Box` or arrays of them; implement `ToDevice` for this type, or keep the device out of its type"
)]
pub trait ToDevice {
    /// This value with every tensor on placement `E`.
    type On<E: Device>;

    /// A copy with every tensor on `placement`; tensors already there are shared, not
    /// copied (as `Tensor::to` does).
    fn to_placement<E: Device>(&self, placement: E) -> Result<Self::On<E>>;

    /// A copy with every tensor on the static placement `E`.
    fn to<E: StaticDevice>(&self) -> Result<Self::On<E>> {
        self.to_placement(E::resolve()?)
    }

    /// A copy with every tensor on the run-time placement `id`.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, DeviceId, Tensor, ToDevice};
    /// let v = Some(Tensor::<Cpu>::ones([1])?);
    /// let d = ToDevice::to_dyn(&v, DeviceId::Cuda(0))?;
    /// assert_eq!(d.unwrap().device(), DeviceId::Cuda(0));
    /// # Ok::<(), locus::Error>(())
    /// ```
    fn to_dyn(&self, id: DeviceId) -> Result<Self::On<Dyn>> {
        self.to_placement(Dyn::new(id))
    }
}

impl<D: Device, T: Element> ToDevice for Tensor<D, T> {
    type On<E: Device> = Tensor<E, T>;

    fn to_placement<E: Device>(&self, placement: E) -> Result<Tensor<E, T>> {
        if placement.id() == self.device() {
            return self.copy_to(placement);
        }
        let key = (self.storage().contents(), placement.id());
        match WALK.with(|w| w.borrow_mut().as_mut().map(|w| w.take(key))) {
            None => self.copy_to(placement),
            Some(Some(copy)) => Ok(self.over_storage(placement, copy)),
            Some(None) => {
                let moved = self.copy_to(placement)?;
                WALK.with(|w| {
                    if let Some(w) = w.borrow_mut().as_mut() {
                        w.used.insert(key, Arc::clone(moved.shared_storage()));
                    }
                });
                Ok(moved)
            }
        }
    }
}

type CopyKey = (ContentsId, DeviceId);

/// Copies that later [`ToDevice`] moves may reuse: a tensor whose contents an earlier
/// move copied to a device, and that have not changed since (same [`ContentsId`]), gets
/// that copy back instead of a new one. `DataParallel` keeps one to refresh its replicas.
#[derive(Default)]
pub(crate) struct CopyCache {
    copies: HashMap<CopyKey, Arc<Storage>>,
}

/// The copies of the walk running on this thread: those of the earlier walk not yet
/// claimed, and those this walk used or made.
struct Walk {
    earlier: HashMap<CopyKey, Arc<Storage>>,
    used: HashMap<CopyKey, Arc<Storage>>,
}

impl Walk {
    fn take(&mut self, key: CopyKey) -> Option<Arc<Storage>> {
        let copy = self.earlier.remove(&key).or_else(|| self.used.get(&key).cloned())?;
        self.used.insert(key, Arc::clone(&copy));
        Some(copy)
    }
}

thread_local! {
    static WALK: RefCell<Option<Walk>> = const { RefCell::new(None) };
}

impl CopyCache {
    /// Runs `moves` (`ToDevice` calls on this thread) reusing the cached copies; the
    /// cache then holds the copies these moves used or made, and no others, so copies of
    /// contents that changed are released.
    pub(crate) fn reuse_in<R>(&mut self, moves: impl FnOnce() -> R) -> R {
        /// Puts back the outer walk and keeps this one's copies, on panic too.
        struct Installed<'a> {
            cache: &'a mut CopyCache,
            outer: Option<Walk>,
        }
        impl Drop for Installed<'_> {
            fn drop(&mut self) {
                let walk = WALK.with(|w| w.replace(self.outer.take()));
                self.cache.copies = walk.map(|w| w.used).unwrap_or_default();
            }
        }
        let earlier = std::mem::take(&mut self.copies);
        let outer = WALK.with(|w| w.replace(Some(Walk { earlier, used: HashMap::new() })));
        let _installed = Installed { cache: self, outer };
        moves()
    }
}

impl<D: Device> ToDevice for PhantomData<D> {
    type On<E: Device> = PhantomData<E>;

    fn to_placement<E: Device>(&self, placement: E) -> Result<PhantomData<E>> {
        // Still check the placement: a missing device is an error, as for a tensor.
        move_placement(placement)?;
        Ok(PhantomData)
    }
}

impl<X: ToDevice> ToDevice for Vec<X> {
    type On<E: Device> = Vec<X::On<E>>;

    fn to_placement<E: Device>(&self, placement: E) -> Result<Self::On<E>> {
        self.iter().map(|x| x.to_placement(placement)).collect()
    }
}

impl<X: ToDevice> ToDevice for Option<X> {
    type On<E: Device> = Option<X::On<E>>;

    fn to_placement<E: Device>(&self, placement: E) -> Result<Self::On<E>> {
        self.as_ref().map(|x| x.to_placement(placement)).transpose()
    }
}

/// A pair moves as one: `(model, optimizer).to::<Cuda<1>>()` moves a model and its
/// optimizer's state in one call.
impl<A: ToDevice, B: ToDevice> ToDevice for (A, B) {
    type On<E: Device> = (A::On<E>, B::On<E>);

    fn to_placement<E: Device>(&self, placement: E) -> Result<Self::On<E>> {
        Ok((self.0.to_placement(placement)?, self.1.to_placement(placement)?))
    }
}

impl<X: ToDevice> ToDevice for Box<X> {
    type On<E: Device> = Box<X::On<E>>;

    fn to_placement<E: Device>(&self, placement: E) -> Result<Self::On<E>> {
        Ok(Box::new((**self).to_placement(placement)?))
    }
}

impl<X: ToDevice, const N: usize> ToDevice for [X; N] {
    type On<E: Device> = [X::On<E>; N];

    fn to_placement<E: Device>(&self, placement: E) -> Result<Self::On<E>> {
        let moved: Vec<X::On<E>> = self.iter().map(|x| x.to_placement(placement)).collect::<Result<_>>()?;
        // N elements in, N out: the conversion cannot fail, and would be an error if it did.
        moved.try_into().map_err(|v: Vec<_>| Error::InvalidArgument {
            op: "to",
            reason: format!("{} of an array's {N} elements were moved", v.len()),
        })
    }
}

/// `field` moved to `placement`: how a field that mentions the device parameter moves
/// in `#[derive(ToDevice)]`. `X` is written out by the macro, so that a field that is
/// not `ToDevice` is reported once, at its type.
pub fn move_field<X: ToDevice, E: Device>(field: &X, placement: E) -> Result<X::On<E>> {
    field.to_placement(placement)
}

/// `placement`, after checking that it exists: how a field whose type is the device
/// parameter itself moves in `#[derive(ToDevice)]`.
pub fn move_placement<E: Device>(placement: E) -> Result<E> {
    crate::backend::for_device(placement.id())?;
    Ok(placement)
}
