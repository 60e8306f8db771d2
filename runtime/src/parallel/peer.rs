//! Peer access between two GPUs, and the ops that may mix them.
//!
//! Ops of two tensors on different GPUs do not compile. [`enable_peer_access`] turns on
//! direct access between two devices and returns a [`PeerAccess`] token; ops across the
//! two exist only as methods of that token, so a program that mixes devices says so, and
//! cannot do it before the access is on.

use std::marker::PhantomData;

use crate::backend;
use crate::device::{Cuda, DeviceId, StaticDevice};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::role::Role;
use crate::tensor::Tensor;

mod sealed {
    pub trait Sealed {}
}

/// A GPU placement known at compile time: `Cuda<N>`, or a role (bound to a GPU).
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Device, StaticDevice};
/// fn ordinal<G: locus::parallel::CudaDevice>() -> locus::Result<locus::DeviceId> { Ok(G::resolve()?.id()) }
/// assert_eq!(ordinal::<locus::Cuda<1>>()?.to_string(), "cuda:1");
/// # Ok::<(), locus::Error>(())
/// ```
pub trait CudaDevice: StaticDevice + sealed::Sealed {}

impl<const N: usize> sealed::Sealed for Cuda<N> {}
impl<const N: usize> CudaDevice for Cuda<N> {}
impl<R: Role> sealed::Sealed for R {}
impl<R: Role> CudaDevice for R {}

/// The backend of two distinct existing devices.
fn pair(op: &'static str, a: DeviceId, b: DeviceId) -> Result<backend::AnyBackend> {
    let backend = backend::for_device(a)?;
    backend::for_device(b)?;
    if a == b {
        return Err(Error::InvalidArgument {
            op,
            reason: format!("{a} and {b} are the same device; peer access joins two different devices"),
        });
    }
    Ok(backend)
}

/// Whether GPU `A` can read and write the memory of GPU `B` directly
/// (`cuDeviceCanAccessPeer`). Two distinct simulated devices of the host backend always
/// can; `A == B` and a missing device are errors.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::parallel::can_access_peer;
/// use locus::Cuda;
/// assert!(can_access_peer::<Cuda<0>, Cuda<0>>().is_err());
/// assert!(can_access_peer::<Cuda<0>, Cuda<99>>().is_err());
/// # if !locus::testing::needs_devices(2)? { return Ok(()); }
/// if locus::backend_name()? == "host" {
///     assert!(can_access_peer::<Cuda<0>, Cuda<1>>()?);
/// }
/// # Ok::<(), locus::Error>(())
/// ```
pub fn can_access_peer<A: CudaDevice, B: CudaDevice>() -> Result<bool> {
    let (a, b) = (A::resolve()?.id(), B::resolve()?.id());
    pair("can_access_peer", a, b)?.can_access_peer(a, b)
}

/// Turns on direct access between GPUs `A` and `B`, both ways
/// (`cuCtxEnablePeerAccess`; access that is already on is fine), and returns the token
/// that ops across the two take. [`Error::NoPeerAccess`] when the devices have no
/// peer-to-peer path.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::parallel::enable_peer_access;
/// use locus::{Cuda, Tensor};
/// # if !locus::testing::needs_devices(2)? { return Ok(()); }
/// let a = Tensor::<Cuda<0>>::full([2], 1.0)?;
/// let b = Tensor::<Cuda<1>>::full([2], 2.0)?;
/// let peer = enable_peer_access::<Cuda<0>, Cuda<1>>()?;
/// assert_eq!(peer.add(&a, &b)?.to_vec()?, vec![3.0, 3.0]);
/// assert_eq!(peer.reverse().copy(&a)?.device().to_string(), "cuda:1");
/// # Ok::<(), locus::Error>(())
/// ```
pub fn enable_peer_access<A: CudaDevice, B: CudaDevice>() -> Result<PeerAccess<A, B>> {
    let (a, b) = (A::resolve()?.id(), B::resolve()?.id());
    pair("enable_peer_access", a, b)?.enable_peer_access(a, b)?;
    Ok(PeerAccess { _devices: PhantomData })
}

/// Proof that GPUs `A` and `B` can access each other's memory: made only by
/// [`enable_peer_access`]. Its methods are the ops that take one tensor on each device;
/// the result lives on `A`.
///
/// The right operand is read from `B` with a peer copy into `A`'s memory, then the op
/// runs on `A`: the same result as copying first, over the direct link.
#[derive(Debug)]
pub struct PeerAccess<A: CudaDevice, B: CudaDevice> {
    _devices: PhantomData<(A, B)>,
}

impl<A: CudaDevice, B: CudaDevice> Clone for PeerAccess<A, B> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<A: CudaDevice, B: CudaDevice> Copy for PeerAccess<A, B> {}

impl<A: CudaDevice, B: CudaDevice> PeerAccess<A, B> {
    /// The same access seen from `B` (it was enabled both ways).
    pub fn reverse(self) -> PeerAccess<B, A> {
        PeerAccess { _devices: PhantomData }
    }

    /// A copy of `x` (on `B`) on `A`, over the peer link.
    pub fn copy<T: Element>(&self, x: &Tensor<B, T>) -> Result<Tensor<A, T>> {
        x.to::<A>()
    }

    /// `lhs + rhs`, broadcasting as `+` does.
    pub fn add<T: Element>(&self, lhs: &Tensor<A, T>, rhs: &Tensor<B, T>) -> Result<Tensor<A, T>> {
        lhs + &self.copy(rhs)?
    }

    /// `lhs - rhs`, broadcasting as `-` does.
    pub fn sub<T: Element>(&self, lhs: &Tensor<A, T>, rhs: &Tensor<B, T>) -> Result<Tensor<A, T>> {
        lhs - &self.copy(rhs)?
    }

    /// `lhs * rhs`, broadcasting as `*` does.
    pub fn mul<T: Element>(&self, lhs: &Tensor<A, T>, rhs: &Tensor<B, T>) -> Result<Tensor<A, T>> {
        lhs * &self.copy(rhs)?
    }

    /// `lhs / rhs`, broadcasting as `/` does.
    pub fn div<T: Element>(&self, lhs: &Tensor<A, T>, rhs: &Tensor<B, T>) -> Result<Tensor<A, T>> {
        lhs / &self.copy(rhs)?
    }

    /// The matrix product `lhs @ rhs`.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::parallel::enable_peer_access;
    /// use locus::{Cuda, Tensor};
    /// # if !locus::testing::needs_devices(2)? { return Ok(()); }
    /// let peer = enable_peer_access::<Cuda<1>, Cuda<0>>()?;
    /// let x = Tensor::<Cuda<1>>::ones([1, 2])?;
    /// let w = Tensor::<Cuda<0>>::full([2, 3], 0.5)?;
    /// assert_eq!(peer.matmul(&x, &w)?.to_vec()?, vec![1.0; 3]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn matmul<T: Element>(&self, lhs: &Tensor<A, T>, rhs: &Tensor<B, T>) -> Result<Tensor<A, T>> {
        lhs.matmul(&self.copy(rhs)?)
    }
}
