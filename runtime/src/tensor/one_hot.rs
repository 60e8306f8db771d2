//! `one_hot`: class indices as rows of zeros with a one at the class (PyTorch's
//! `F.one_hot`), built from existing ops: the indices with a new last dim, compared under
//! broadcasting with `0..num_classes`, converted to the element type wanted.

use super::Tensor;
use crate::device::Device;
use crate::element::Element;
use crate::error::{Error, Result};

impl<D: Device> Tensor<D, i32> {
    /// For each index a row of `num_classes` elements of `U`, one at the index and zero
    /// elsewhere: a tensor of shape `[..self.shape(), num_classes]` (PyTorch's
    /// `F.one_hot`, with the class count explicit and the element type chosen). An index
    /// below 0 or not below `num_classes` is an `Err` naming it; finding it reads the
    /// smallest and largest index back to the host, so this waits for them.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let labels = Tensor::<Cpu, i32>::from_vec(vec![2, 0, 1], [3])?;
    /// let hot = labels.one_hot::<f32>(3)?;
    /// assert_eq!(hot.shape(), &[3, 3]);
    /// assert_eq!(hot.to_vec()?, vec![0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0]);
    /// assert!(labels.one_hot::<f32>(2).is_err());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn one_hot<U: Element>(&self, num_classes: usize) -> Result<Tensor<D, U>> {
        let bad = |reason: String| Error::InvalidArgument { op: "one_hot", reason };
        let n = i32::try_from(num_classes)
            .map_err(|_| bad(format!("{num_classes} classes; at most i32::MAX (the index type)")))?;
        if self.numel() > 0 {
            let (lo, hi) = (self.min()?.item()?, self.max()?.item()?);
            for index in [lo, hi] {
                if index < 0 || index >= n {
                    return Err(bad(format!("index {index} is out of range for {num_classes} classes")));
                }
            }
        }
        let classes = Tensor::<D, i32>::arange_on(self.placement(), 0, n, 1)?;
        self.unsqueeze(self.rank())?.eq(&classes)?.to_dtype::<U>()
    }
}
