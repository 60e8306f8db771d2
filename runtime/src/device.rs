//! Placement types: where a tensor lives, as a type.
//!
//! Static placements ([`Cpu`], [`Pinned`], [`Cuda<N>`]) are zero-sized; [`Dyn`] carries
//! a [`DeviceId`] chosen at run time.

use std::fmt;

use crate::placement::{
    PlacedWith, SameEventDevice, SameGraphDevice, SameKernelDevice, SamePlacement, SameStreamDevice,
};

pub use crate::device_id::DeviceId;
use crate::role::Role;

mod sealed {
    pub trait Sealed {}
}

/// A placement: where a tensor's memory lives.
///
/// Implemented by [`Cpu`], [`Pinned`], [`Cuda<N>`], [`Dyn`] and roles
/// ([`Role`](crate::Role), declared with [`role!`](crate::role)) only. The supertraits
/// `SamePlacement<Self>`, `PlacedWith<Self>`, `SameStreamDevice<Self>`, `SameEventDevice<Self>` and `SameGraphDevice<Self>` let
/// generic code combine two tensors, or a tensor, a stream and an event, of one
/// placement `D` with no extra bound.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Cuda, Device, DeviceId};
/// assert_eq!(Cuda::<3>.id(), DeviceId::Cuda(3));
/// ```
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a placement",
    label = "not a placement",
    note = "a placement is `Cpu`, `Pinned`, `Cuda<N>`, `Dyn` or a role declared with `locus::role!`; `Here` is one only inside a fn, impl block or `with_device!` with a literal device or a role, such as `#[on_device(1)]`"
)]
pub trait Device:
    Copy
    + Send
    + Sync
    + fmt::Debug
    + 'static
    + SamePlacement<Self>
    + PlacedWith<Self>
    + SameStreamDevice<Self>
    + SameEventDevice<Self>
    + SameGraphDevice<Self>
    + SameKernelDevice<Self>
    + sealed::Sealed
{
    /// The run-time name of this placement.
    fn id(&self) -> DeviceId;
}

/// A placement known at compile time: [`Cpu`], [`Pinned`], [`Cuda<N>`] and every
/// [`Role`](crate::Role). Code generic over `D: StaticDevice` gets the placement from its
/// type with [`resolve`](Self::resolve).
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Cuda, Device, DeviceId, StaticDevice};
/// fn where_is<D: StaticDevice>() -> locus::Result<DeviceId> {
///     Ok(D::resolve()?.id())
/// }
/// assert_eq!(where_is::<Cuda<0>>()?, DeviceId::Cuda(0));
/// # Ok::<(), locus::Error>(())
/// ```
pub trait StaticDevice: Device {
    /// This placement: always `Ok` for [`Cpu`], [`Pinned`] and [`Cuda<N>`]; for a role,
    /// its value once bound, else [`Error::Role`](crate::Error::Role) naming it.
    fn resolve() -> crate::error::Result<Self>;
}

/// A placement whose device is fixed at compile time: [`Cpu`], [`Pinned`], [`Cuda<N>`]
/// (not a role, which is bound at start-up).
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{FixedDevice, Pinned, DeviceId};
/// assert_eq!(Pinned::ID, DeviceId::Pinned);
/// ```
pub trait FixedDevice: StaticDevice + Default {
    /// The run-time name of this placement.
    const ID: DeviceId;
}

/// Pageable host memory (an ordinary `Vec`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Cpu;

/// Page-locked host memory: fast, async-capable copies to and from a GPU.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Pinned;

/// The CUDA device with ordinal `N`, known at compile time.
///
/// An ordinal beyond the device count is [`Error::NoSuchDevice`](crate::Error::NoSuchDevice) at first use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Cuda<const N: usize>;

/// A placement chosen at run time. Ops on `Dyn` tensors check placements when they run
/// and return [`Error::DeviceMismatch`](crate::Error::DeviceMismatch) when operands differ.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Device, DeviceId, Dyn};
/// let d = Dyn::new(DeviceId::Cuda(1));
/// assert_eq!(d.id().to_string(), "cuda:1");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Dyn(DeviceId);

impl Dyn {
    /// A run-time placement on `id`.
    pub const fn new(id: DeviceId) -> Self {
        Dyn(id)
    }
}

impl From<DeviceId> for Dyn {
    fn from(id: DeviceId) -> Self {
        Dyn(id)
    }
}

/// The device of the enclosing `#[on_device(n)]` or `with_device!(n => ..)`, for a
/// literal ordinal `n`: there the macro makes `Here` an alias of `Cuda<n>`, with no
/// import needed.
///
/// Anywhere else `Here` is this type, which is not a placement, so that a `Here` left
/// outside the attribute fails to compile with a message saying where it belongs:
///
/// ```text
/// use locus::{Here, Tensor};
/// fn step(x: &Tensor<Here>) {} // `Here` is not a placement
/// ```
pub enum Here {}

impl sealed::Sealed for Cpu {}
impl sealed::Sealed for Pinned {}
impl<const N: usize> sealed::Sealed for Cuda<N> {}
impl sealed::Sealed for Dyn {}
impl<R: Role> sealed::Sealed for R {}

impl Device for Cpu {
    fn id(&self) -> DeviceId {
        DeviceId::Cpu
    }
}
impl Device for Pinned {
    fn id(&self) -> DeviceId {
        DeviceId::Pinned
    }
}
impl<const N: usize> Device for Cuda<N> {
    fn id(&self) -> DeviceId {
        Self::ID
    }
}
impl Device for Dyn {
    fn id(&self) -> DeviceId {
        self.0
    }
}
// Not recommended in errors: a non-placement gets `Device`'s message, not "not a Role".
#[diagnostic::do_not_recommend]
impl<R: Role> Device for R {
    fn id(&self) -> DeviceId {
        crate::role::device_of::<R>()
    }
}

impl StaticDevice for Cpu {
    fn resolve() -> crate::error::Result<Self> {
        Ok(Cpu)
    }
}
impl StaticDevice for Pinned {
    fn resolve() -> crate::error::Result<Self> {
        Ok(Pinned)
    }
}
impl<const N: usize> StaticDevice for Cuda<N> {
    fn resolve() -> crate::error::Result<Self> {
        Ok(Cuda)
    }
}
#[diagnostic::do_not_recommend]
impl<R: Role> StaticDevice for R {
    fn resolve() -> crate::error::Result<Self> {
        crate::role::value::<R>()
    }
}

impl FixedDevice for Cpu {
    const ID: DeviceId = DeviceId::Cpu;
}
impl FixedDevice for Pinned {
    const ID: DeviceId = DeviceId::Pinned;
}
impl<const N: usize> FixedDevice for Cuda<N> {
    // An ordinal past u32 saturates, so it can never alias a real device.
    const ID: DeviceId = DeviceId::Cuda(if N > u32::MAX as usize { u32::MAX } else { N as u32 });
}

/// The CUDA devices, `cuda:0` up to `cuda:{n - 1}` for [`device_count`](crate::device_count)
/// `n`: the GPUs the driver shows (after `CUDA_VISIBLE_DEVICES`), or the host backend's
/// `LOCUS_HOST_DEVICES` simulated ones.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{device_count, devices, DeviceId};
/// let all = devices()?;
/// assert_eq!(all.len(), device_count()?);
/// assert_eq!(all[0], DeviceId::Cuda(0));
/// # Ok::<(), locus::Error>(())
/// ```
pub fn devices() -> crate::error::Result<Vec<DeviceId>> {
    let n = crate::backend::device_count()?;
    Ok((0..n).map(|i| DeviceId::Cuda(u32::try_from(i).unwrap_or(u32::MAX))).collect())
}
