//! Conversions between static placements and `Dyn` that never copy: erasing the
//! placement (`into_dyn`, `From`) and checking it back (`try_into_device`, `TryFrom`),
//! as a HAL steps a typed pin down to an erased one and back; and the one conversion of
//! the element type, `to_dtype`, which copies on the same device.

use std::marker::PhantomData;

use super::Tensor;

use crate::device::{Device, Dyn, StaticDevice};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::shape::Shape;

impl<D: Device, T: Element> Tensor<D, T> {
    /// The same tensor typed with `U`, which the caller knows to be its element type.
    pub(crate) fn relabeled<U: Element>(self) -> Tensor<D, U> {
        debug_assert_eq!(T::DTYPE, U::DTYPE);
        Tensor {
            storage: self.storage,
            shape: self.shape,
            placement: self.placement,
            _elem: PhantomData,
            grad_fn: self.grad_fn,
        }
    }

    /// The same tensor typed with `U`, if `U` is its element type (no copy); else itself.
    pub(crate) fn retyped<U: Element>(self) -> std::result::Result<Tensor<D, U>, Self> {
        if T::DTYPE != U::DTYPE {
            return Err(self);
        }
        Ok(Tensor {
            storage: self.storage,
            shape: self.shape,
            placement: self.placement,
            _elem: PhantomData,
            grad_fn: self.grad_fn,
        })
    }

    /// The same tensor typed for the static placement `E`, if that is where it is: a
    /// check, never a copy. `Error::NotOnDevice` names where it really is.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Cuda, DeviceId, Error, Tensor};
    /// let d = Tensor::<Cuda<0>>::ones([2])?.into_dyn();
    /// let back: Tensor<Cuda<0>> = d.clone().try_into_device::<Cuda<0>>()?;
    /// assert_eq!(back.to_vec()?, vec![1.0, 1.0]);
    /// let err = d.try_into_device::<Cpu>().unwrap_err();
    /// assert_eq!(err, Error::NotOnDevice { expected: DeviceId::Cpu, actual: DeviceId::Cuda(0) });
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn try_into_device<E: StaticDevice>(self) -> Result<Tensor<E, T>> {
        let placement = E::resolve()?;
        if self.device() != placement.id() {
            return Err(Error::NotOnDevice { expected: placement.id(), actual: self.device() });
        }
        Ok(Tensor { storage: self.storage, shape: self.shape, placement, _elem: PhantomData, grad_fn: self.grad_fn })
    }

    /// The elements converted to `U`, on the same device (PyTorch's `.to(dtype)`). Float
    /// to integer truncates toward zero and saturates, NaN becomes 0; integer to integer
    /// wraps (as Rust's `as`); to a float type rounds to nearest, ties to even, once. The
    /// same type gives a tensor sharing this one's memory (copy-on-write), as PyTorch
    /// returns `self`.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{bf16, Cpu, Tensor};
    /// let t = Tensor::<Cpu>::from_vec(vec![1.0, 2.5, -3.7, 1e9], [4])?;
    /// assert_eq!(t.to_dtype::<i32>()?.to_vec()?, vec![1, 2, -3, 1_000_000_000]);
    /// let h = t.to_dtype::<bf16>()?;
    /// assert_eq!(h.to_vec()?[1], bf16::from_f32(2.5));
    /// assert_eq!(h.to_dtype::<f32>()?.to_vec()?[3], 998_244_352.0); // 8 bits of mantissa
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn to_dtype<U: Element>(&self) -> Result<Tensor<D, U>> {
        if let Ok(same) = self.clone().retyped::<U>() {
            return Ok(same);
        }
        let buf = self.queued("to_dtype")?.cast(T::DTYPE, U::DTYPE, self.numel())?;
        let shape = Shape::new("to_dtype", self.shape.to_vec(), U::DTYPE)?;
        let out = Tensor::from_buffer(self.placement(), buf, shape);
        Ok(self.track1(out, "to_dtype", |_| |g: Tensor<_, _>| g.to_dtype::<T>()))
    }
}

/// `Tensor<Cuda<1>>` into `Tensor<Dyn>`, as [`Tensor::into_dyn`].
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Cpu, Dyn, Tensor};
/// let d: Tensor<Dyn> = Tensor::<Cpu>::zeros([1])?.into();
/// assert_eq!(d.device().to_string(), "cpu");
/// # Ok::<(), locus::Error>(())
/// ```
impl<S: StaticDevice, T: Element> From<Tensor<S, T>> for Tensor<Dyn, T> {
    fn from(t: Tensor<S, T>) -> Self {
        t.into_dyn()
    }
}

/// `Tensor<Dyn>` back to a static placement, as [`Tensor::try_into_device`].
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Cuda, Dyn, Pinned, Tensor};
/// let d = Tensor::<Pinned>::ones([1])?.into_dyn();
/// assert!(Tensor::<Cuda<0>>::try_from(d.clone()).is_err());
/// let p: Tensor<Pinned> = d.try_into()?;
/// assert_eq!(p.to_vec()?, vec![1.0]);
/// # Ok::<(), locus::Error>(())
/// ```
impl<S: StaticDevice, T: Element> TryFrom<Tensor<Dyn, T>> for Tensor<S, T> {
    type Error = Error;

    fn try_from(t: Tensor<Dyn, T>) -> Result<Self> {
        t.try_into_device::<S>()
    }
}
