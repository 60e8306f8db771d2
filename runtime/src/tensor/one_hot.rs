//! `one_hot`: class indices as rows of zeros with a one at the class (PyTorch's
//! `F.one_hot`), built from existing ops: the indices with a new last dim, compared under
//! broadcasting with `0..num_classes`, converted to the element type wanted.

use super::Tensor;
use crate::device::Device;
use crate::element::{Element, IndexElement};
use crate::error::{Error, Result};
use crate::shape::Shape;

impl<D: Device, I: IndexElement> Tensor<D, I> {
    /// For each index a row of `num_classes` elements of `U`, one at the index and zero
    /// elsewhere: a tensor of shape `[..self.shape(), num_classes]` (PyTorch's
    /// `F.one_hot`, with the class count explicit and the element type chosen). An index
    /// below 0 or not below `num_classes` is an `Err` naming it; finding it reads the
    /// smallest and largest index back to the host, so this waits for them. The indices
    /// are `i32` or `i64` ([`IndexElement`]).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let labels = Tensor::<Cpu, i32>::from_vec(vec![2, 0, 1], [3])?;
    /// let hot = labels.one_hot::<f32>(3)?;
    /// assert_eq!(hot.shape(), &[3, 3]);
    /// assert_eq!(hot.to_vec()?, vec![0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
    /// assert!(labels.one_hot::<f32>(2).is_err());
    /// let wide = Tensor::<Cpu, i64>::from_vec(vec![1, 1 << 33], [2])?;
    /// assert!(wide.one_hot::<u8>(2).unwrap_err().to_string().contains("index 8589934592"));
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn one_hot<U: Element>(&self, num_classes: usize) -> Result<Tensor<D, U>> {
        let bad = |reason: String| Error::InvalidArgument { op: "one_hot", reason };
        let n = i32::try_from(num_classes)
            .map_err(|_| bad(format!("{num_classes} classes; at most i32::MAX (the index type)")))?;
        // The result's shape first: one too large to exist fails before the `0..num_classes`
        // row below is made (8 GiB for `i32::MAX` classes), and with no index, no row is.
        let mut dims = self.shape().to_vec();
        dims.push(num_classes);
        let shape = Shape::result("one_hot", dims, U::DTYPE, &[self.shape()])?;
        if self.numel() == 0 {
            return Tensor::zeros_on(self.placement(), &*shape);
        }
        let (lo, hi) = (self.min()?.item()?.to_i64(), self.max()?.item()?.to_i64());
        for index in [lo, hi] {
            if index < 0 || index >= n.into() {
                return Err(bad(format!("index {index} is out of range for {num_classes} classes")));
            }
        }
        // Every index is in [0, n), so an i64 one converts exactly.
        let index = match self.clone().retyped::<i32>() {
            Ok(narrow) => narrow,
            Err(wide) => wide.to_dtype::<i32>()?,
        };
        let classes = Tensor::<D, i32>::arange_on(self.placement(), 0, n, 1)?;
        index.unsqueeze(index.rank())?.eq(&classes)?.to_dtype::<U>()
    }
}
