//! The two shapes of argument the collectives take: a list of devices to send to
//! ([`DeviceList`]) and tensors spread over devices ([`Parts`]). Each comes typed (a
//! tuple of placements, a tuple of tensors) or run-time (`DeviceId`s, slices and `Vec`s
//! of tensors); the result has the matching shape.

use crate::device::{Device, DeviceId, Dyn};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::to_device::ToDevice;

mod sealed {
    pub trait Devices {}
    pub trait Parts {}
}

/// Where a collective sends its results: a tuple of placements such as
/// `(Cuda::<0>, Cuda::<1>)`, giving a tuple of typed tensors; or `DeviceId`s (a slice,
/// `&Vec` or array), giving `Tensor<Dyn>`s in a `Vec` or array.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::parallel::DeviceList;
/// use locus::{Cuda, DeviceId};
/// assert_eq!((Cuda::<0>, Cuda::<1>).device_ids(), vec![DeviceId::Cuda(0), DeviceId::Cuda(1)]);
/// assert_eq!((&[DeviceId::Cuda(1)][..]).device_ids(), vec![DeviceId::Cuda(1)]);
/// ```
pub trait DeviceList: sealed::Devices {
    /// One tensor of element type `T` per device of the list.
    type Tensors<T: Element>;

    /// The devices, in order.
    fn device_ids(&self) -> Vec<DeviceId>;

    /// Tensors on the devices of the list, in order, under the list's placements.
    #[doc(hidden)]
    fn place<T: Element>(&self, parts: Vec<Tensor<Dyn, T>>) -> Result<Self::Tensors<T>>;

    /// One copy of a model of type `M` per device of the list: a tuple of `M::On<_>` of
    /// each placement for a tuple, `M::On<Dyn>`s for `DeviceId`s.
    type Replicas<M: ToDevice>;

    /// `model` on each device of the list, in order, under the list's placements.
    #[doc(hidden)]
    fn replicate<M: ToDevice>(&self, model: &M) -> Result<Self::Replicas<M>>;
}

/// Tensors spread over devices, as gathers and reductions take them: a tuple of tensors
/// (each with its own placement), or a slice, `Vec` or array of tensors.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::parallel::Parts;
/// use locus::{Cpu, Cuda, Tensor};
/// let parts = (Tensor::<Cuda<0>>::ones([1])?, Tensor::<Cpu>::ones([2])?);
/// assert_eq!(parts.tensors().len(), 2);
/// # Ok::<(), locus::Error>(())
/// ```
pub trait Parts: sealed::Parts {
    /// The element type of every tensor.
    type Elem: Element;
    /// The same shape of collection, owning its tensors (a `Vec` for a slice).
    type Owned;

    /// The tensors, in order, with run-time placements (no copies).
    fn tensors(&self) -> Vec<Tensor<Dyn, Self::Elem>>;

    /// Results on the devices of `self`, in order, under the same placements.
    #[doc(hidden)]
    fn same_places(&self, results: Vec<Tensor<Dyn, Self::Elem>>) -> Result<Self::Owned>;
}

/// The next result, under `placement` (the same device, so no copy).
fn take<D: Device, T: Element>(it: &mut impl Iterator<Item = Tensor<Dyn, T>>, placement: D) -> Result<Tensor<D, T>> {
    let t = it
        .next()
        .ok_or_else(|| Error::InvalidArgument { op: "collective", reason: "fewer results than devices".into() })?;
    t.same_device_as("collective", placement.id())?;
    t.copy_to(placement)
}

macro_rules! tuples {
    ($(($($D:ident $i:tt),+);)+) => {$(
        impl<$($D: Device),+> sealed::Devices for ($($D,)+) {}

        impl<$($D: Device),+> DeviceList for ($($D,)+) {
            type Tensors<T: Element> = ($(Tensor<$D, T>,)+);

            fn device_ids(&self) -> Vec<DeviceId> {
                vec![$(self.$i.id()),+]
            }

            fn place<T: Element>(&self, parts: Vec<Tensor<Dyn, T>>) -> Result<Self::Tensors<T>> {
                let mut it = parts.into_iter();
                Ok(($(take(&mut it, self.$i)?,)+))
            }

            type Replicas<M: ToDevice> = ($(M::On<$D>,)+);

            fn replicate<M: ToDevice>(&self, model: &M) -> Result<Self::Replicas<M>> {
                Ok(($(model.to_placement(self.$i)?,)+))
            }
        }

        impl<T: Element, $($D: Device),+> sealed::Parts for ($(Tensor<$D, T>,)+) {}

        impl<T: Element, $($D: Device),+> Parts for ($(Tensor<$D, T>,)+) {
            type Elem = T;
            type Owned = Self;

            fn tensors(&self) -> Vec<Tensor<Dyn, T>> {
                vec![$(self.$i.clone().into_dyn()),+]
            }

            fn same_places(&self, results: Vec<Tensor<Dyn, T>>) -> Result<Self> {
                let mut it = results.into_iter();
                Ok(($(take(&mut it, self.$i.placement())?,)+))
            }
        }
    )+};
}

tuples! {
    (A 0);
    (A 0, B 1);
    (A 0, B 1, C 2);
    (A 0, B 1, C 2, E 3);
    (A 0, B 1, C 2, E 3, F 4);
    (A 0, B 1, C 2, E 3, F 4, G 5);
    (A 0, B 1, C 2, E 3, F 4, G 5, H 6);
    (A 0, B 1, C 2, E 3, F 4, G 5, H 6, I 7);
}

impl sealed::Devices for &[DeviceId] {}

impl DeviceList for &[DeviceId] {
    type Tensors<T: Element> = Vec<Tensor<Dyn, T>>;

    fn device_ids(&self) -> Vec<DeviceId> {
        self.to_vec()
    }

    fn place<T: Element>(&self, parts: Vec<Tensor<Dyn, T>>) -> Result<Vec<Tensor<Dyn, T>>> {
        let mut it = parts.into_iter();
        self.iter().map(|&id| take(&mut it, Dyn::new(id))).collect()
    }

    type Replicas<M: ToDevice> = Vec<M::On<Dyn>>;

    fn replicate<M: ToDevice>(&self, model: &M) -> Result<Vec<M::On<Dyn>>> {
        self.iter().map(|&id| model.to_dyn(id)).collect()
    }
}

impl sealed::Devices for &Vec<DeviceId> {}

impl DeviceList for &Vec<DeviceId> {
    type Tensors<T: Element> = Vec<Tensor<Dyn, T>>;

    fn device_ids(&self) -> Vec<DeviceId> {
        self.to_vec()
    }

    fn place<T: Element>(&self, parts: Vec<Tensor<Dyn, T>>) -> Result<Vec<Tensor<Dyn, T>>> {
        self.as_slice().place(parts)
    }

    type Replicas<M: ToDevice> = Vec<M::On<Dyn>>;

    fn replicate<M: ToDevice>(&self, model: &M) -> Result<Vec<M::On<Dyn>>> {
        self.as_slice().replicate(model)
    }
}

impl<const N: usize> sealed::Devices for [DeviceId; N] {}

impl<const N: usize> DeviceList for [DeviceId; N] {
    type Tensors<T: Element> = [Tensor<Dyn, T>; N];

    fn device_ids(&self) -> Vec<DeviceId> {
        self.to_vec()
    }

    fn place<T: Element>(&self, parts: Vec<Tensor<Dyn, T>>) -> Result<[Tensor<Dyn, T>; N]> {
        array(self.as_slice().place(parts)?)
    }

    type Replicas<M: ToDevice> = [M::On<Dyn>; N];

    fn replicate<M: ToDevice>(&self, model: &M) -> Result<[M::On<Dyn>; N]> {
        array(self.as_slice().replicate(model)?)
    }
}

fn array<X, const N: usize>(v: Vec<X>) -> Result<[X; N]> {
    let n = v.len();
    v.try_into()
        .map_err(|_| Error::InvalidArgument { op: "collective", reason: format!("{n} results for an array of {N}") })
}

impl<D: Device, T: Element> sealed::Parts for [Tensor<D, T>] {}

impl<D: Device, T: Element> Parts for [Tensor<D, T>] {
    type Elem = T;
    type Owned = Vec<Tensor<D, T>>;

    fn tensors(&self) -> Vec<Tensor<Dyn, T>> {
        self.iter().map(|t| t.clone().into_dyn()).collect()
    }

    fn same_places(&self, results: Vec<Tensor<Dyn, T>>) -> Result<Vec<Tensor<D, T>>> {
        let mut it = results.into_iter();
        self.iter().map(|t| take(&mut it, t.placement())).collect()
    }
}

impl<D: Device, T: Element> sealed::Parts for Vec<Tensor<D, T>> {}

impl<D: Device, T: Element> Parts for Vec<Tensor<D, T>> {
    type Elem = T;
    type Owned = Vec<Tensor<D, T>>;

    fn tensors(&self) -> Vec<Tensor<Dyn, T>> {
        self.as_slice().tensors()
    }

    fn same_places(&self, results: Vec<Tensor<Dyn, T>>) -> Result<Vec<Tensor<D, T>>> {
        self.as_slice().same_places(results)
    }
}

impl<D: Device, T: Element, const N: usize> sealed::Parts for [Tensor<D, T>; N] {}

impl<D: Device, T: Element, const N: usize> Parts for [Tensor<D, T>; N] {
    type Elem = T;
    type Owned = [Tensor<D, T>; N];

    fn tensors(&self) -> Vec<Tensor<Dyn, T>> {
        self.as_slice().tensors()
    }

    fn same_places(&self, results: Vec<Tensor<Dyn, T>>) -> Result<[Tensor<D, T>; N]> {
        array(self.as_slice().same_places(results)?)
    }
}
