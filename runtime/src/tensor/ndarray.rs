//! Conversions to and from [`ndarray`] arrays (the `ndarray` feature): host tensors from
//! owned arrays, moving the array's vector when it already is a row-major tensor's
//! memory and copying once when it is not, zero-copy views of host tensors, and copies
//! of any tensor as an owned array.

use ndarray::{Array, ArrayD, ArrayViewD, Dimension, IxDyn};

use super::Tensor;
use crate::backend::{host, Buffer};
use crate::copy::HostPlacement;
use crate::device::{Device, DeviceId};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::shape::Shape;

impl<D: HostPlacement, T: Element> Tensor<D, T> {
    /// A host tensor of `array`'s shape and elements (in row-major order). On [`Cpu`]
    /// an array in standard layout whose vector holds exactly its elements gives that
    /// vector to the tensor, with no copy; any other array (transposed, sliced, with
    /// strides) is copied once, as is every array into [`Pinned`] memory.
    ///
    /// [`Cpu`]: crate::Cpu
    /// [`Pinned`]: crate::Pinned
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Pinned, Tensor};
    /// use ndarray::{array, ArrayD};
    /// let a: ArrayD<f32> = array![[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]].into_dyn();
    /// let at = a.as_ptr();
    /// let t = Tensor::<Cpu>::from_ndarray(a)?;
    /// assert_eq!(t.shape(), &[2, 3]);
    /// assert_eq!(t.as_slice().as_ptr(), at); // moved, not copied
    ///
    /// let transposed = array![[1, 2], [3, 4]].reversed_axes();
    /// let p = Tensor::<Pinned, i32>::from_ndarray(transposed)?;
    /// assert_eq!(p.as_slice(), &[1, 3, 2, 4]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn from_ndarray<Di: Dimension>(array: Array<T, Di>) -> Result<Self> {
        let shape = Shape::new("from_ndarray", array.shape(), T::DTYPE)?;
        let placement = D::resolve()?;
        let buf = if placement.id() == DeviceId::Cpu && array.is_standard_layout() {
            let n = array.len();
            match array.into_raw_vec_and_offset() {
                (v, Some(0) | None) if v.len() == n => host::host().adopt_vec(v)?,
                (v, offset) => {
                    // Standard layout over part of the vector (an array sliced in place):
                    // the elements are the contiguous run from the offset.
                    let at = offset.unwrap_or(0);
                    host::host().adopt_vec(v[at..at + n].to_vec())?
                }
            }
        } else {
            let mut out = host::host().alloc_for_overwrite(placement.id(), shape.numel() * T::DTYPE.size())?;
            let dst: &mut [T] = bytemuck::cast_slice_mut(out.bytes_mut());
            for (d, s) in dst.iter_mut().zip(array.iter()) {
                *d = *s;
            }
            out
        };
        Ok(Tensor::from_buffer(placement, Buffer::host(buf), shape))
    }

    /// The elements as an [`ndarray`] view of this tensor's shape, in place (no copy).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu>::arange(0.0, 6.0, 1.0)?.reshape([2, 3])?;
    /// let v = t.as_ndarray()?;
    /// assert_eq!(v[[1, 2]], 5.0);
    /// assert_eq!(v.as_ptr(), t.as_slice().as_ptr());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn as_ndarray(&self) -> Result<ArrayViewD<'_, T>> {
        ArrayViewD::from_shape(IxDyn(self.shape()), self.as_slice()).map_err(|e| Error::InvalidArgument {
            op: "as_ndarray",
            reason: format!("shape {:?} does not fit {} elements: {e}", self.shape(), self.numel()),
        })
    }
}

impl<D: Device, T: Element> Tensor<D, T> {
    /// A copy of the elements as an owned [`ndarray`] array of this tensor's shape, from
    /// any placement.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let t = Tensor::<Cuda<0>, i32>::arange(0, 4, 1)?.reshape([2, 2])?;
    /// assert_eq!(t.to_ndarray()?, ndarray::array![[0, 1], [2, 3]].into_dyn());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn to_ndarray(&self) -> Result<ArrayD<T>> {
        ArrayD::from_shape_vec(IxDyn(self.shape()), self.to_vec()?).map_err(|e| Error::InvalidArgument {
            op: "to_ndarray",
            reason: format!("shape {:?} does not fit {} elements: {e}", self.shape(), self.numel()),
        })
    }
}
