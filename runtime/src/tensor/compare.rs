//! Comparisons (`eq`, `ne`, `lt`, `le`, `gt`, `ge`, of two tensors under NumPy
//! broadcasting or of a tensor and a scalar) giving `u8` masks of 1 and 0, and
//! [`Tensor::where_`], which selects by such a mask. Comparisons are IEEE: NaN compares
//! false, except under `ne`, where it is true; `-0.0` equals `0.0`.

use super::Tensor;
use crate::backend::CompareOp;
use crate::device::Device;
use crate::element::{DType, Element};
use crate::error::Result;
use crate::placement::{PlacedWith, SamePlacement};
use crate::shape;

impl<D: Device, T: Element> Tensor<D, T> {
    fn compare<E: Device>(&self, op: CompareOp, rhs: &Tensor<E, T>) -> Result<Tensor<D, u8>> {
        let name = op.name();
        self.same_device(name, rhs)?;
        let (out_shape, layout) = shape::broadcast(name, &self.shape, &rhs.shape, DType::U8)?;
        let buf = self.queued("a comparison")?.compare(rhs.buffer(), op, T::DTYPE, &out_shape, &layout)?;
        Ok(Tensor::from_buffer(self.placement, buf, out_shape))
    }

    fn compare_scalar(&self, op: CompareOp, value: T) -> Result<Tensor<D, u8>> {
        let buf = self.queued("a comparison")?.compare_scalar(op, T::DTYPE, self.numel(), value.to_scalar())?;
        let out = shape::Shape::new(op.name(), self.shape.to_vec(), DType::U8)?;
        Ok(Tensor::from_buffer(self.placement, buf, out))
    }

    /// `self == rhs` elementwise as 1 or 0, under NumPy broadcasting (PyTorch's `eq`);
    /// NaN equals nothing, `-0.0 == 0.0`.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let a = Tensor::<Cuda<0>>::from_vec(vec![1.0, 2.0, f32::NAN, -0.0], [4])?;
    /// let b = Tensor::<Cuda<0>>::from_vec(vec![1.0, 3.0, f32::NAN, 0.0], [4])?;
    /// assert_eq!(a.eq(&b)?.to_vec()?, vec![1, 0, 0, 1]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn eq<E: Device>(&self, rhs: &Tensor<E, T>) -> Result<Tensor<D, u8>>
    where
        D: SamePlacement<E>,
    {
        self.compare(CompareOp::Eq, rhs)
    }

    /// `self != rhs` elementwise as 1 or 0, under NumPy broadcasting; NaN differs from
    /// everything, itself included.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let a = Tensor::<Cpu>::from_vec(vec![1.0, f32::NAN], [2])?;
    /// assert_eq!(a.ne(&a)?.to_vec()?, vec![0, 1]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn ne<E: Device>(&self, rhs: &Tensor<E, T>) -> Result<Tensor<D, u8>>
    where
        D: SamePlacement<E>,
    {
        self.compare(CompareOp::Ne, rhs)
    }

    /// `self < rhs` elementwise as 1 or 0, under NumPy broadcasting.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let m = Tensor::<Cuda<0>, i32>::from_vec(vec![1, 5, 3, 4], [2, 2])?;
    /// let row = Tensor::<Cuda<0>, i32>::from_vec(vec![2, 4], [2])?;
    /// assert_eq!(m.lt(&row)?.to_vec()?, vec![1, 0, 0, 0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn lt<E: Device>(&self, rhs: &Tensor<E, T>) -> Result<Tensor<D, u8>>
    where
        D: SamePlacement<E>,
    {
        self.compare(CompareOp::Lt, rhs)
    }

    /// `self <= rhs` elementwise as 1 or 0, under NumPy broadcasting.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let a = Tensor::<Cpu, u8>::from_vec(vec![1, 2, 3], [3])?;
    /// let b = Tensor::<Cpu, u8>::from_vec(vec![2], [1])?;
    /// assert_eq!(a.le(&b)?.to_vec()?, vec![1, 1, 0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn le<E: Device>(&self, rhs: &Tensor<E, T>) -> Result<Tensor<D, u8>>
    where
        D: SamePlacement<E>,
    {
        self.compare(CompareOp::Le, rhs)
    }

    /// `self > rhs` elementwise as 1 or 0, under NumPy broadcasting.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let col = Tensor::<Cuda<0>, f64>::from_vec(vec![0.0, 2.0], [2, 1])?;
    /// let row = Tensor::<Cuda<0>, f64>::from_vec(vec![1.0, -1.0, 3.0], [3])?;
    /// let g = col.gt(&row)?;
    /// assert_eq!((g.shape(), g.to_vec()?), (&[2, 3][..], vec![0, 1, 0, 1, 1, 0]));
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn gt<E: Device>(&self, rhs: &Tensor<E, T>) -> Result<Tensor<D, u8>>
    where
        D: SamePlacement<E>,
    {
        self.compare(CompareOp::Gt, rhs)
    }

    /// `self >= rhs` elementwise as 1 or 0, under NumPy broadcasting.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let a = Tensor::<Cpu>::from_vec(vec![1.0, 2.0, f32::NAN], [3])?;
    /// let b = Tensor::<Cpu>::full([], 2.0)?;
    /// assert_eq!(a.ge(&b)?.to_vec()?, vec![0, 1, 0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn ge<E: Device>(&self, rhs: &Tensor<E, T>) -> Result<Tensor<D, u8>>
    where
        D: SamePlacement<E>,
    {
        self.compare(CompareOp::Ge, rhs)
    }

    /// `x == value` elementwise as 1 or 0.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let t = Tensor::<Cuda<0>, i32>::from_vec(vec![3, 1, 3], [3])?;
    /// assert_eq!(t.eq_scalar(3)?.to_vec()?, vec![1, 0, 1]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn eq_scalar(&self, value: T) -> Result<Tensor<D, u8>> {
        self.compare_scalar(CompareOp::Eq, value)
    }

    /// `x != value` elementwise as 1 or 0 (NaN differs from everything).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu>::from_vec(vec![0.0, f32::NAN], [2])?;
    /// assert_eq!(t.ne_scalar(f32::NAN)?.to_vec()?, vec![1, 1]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn ne_scalar(&self, value: T) -> Result<Tensor<D, u8>> {
        self.compare_scalar(CompareOp::Ne, value)
    }

    /// `x < value` elementwise as 1 or 0.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let t = Tensor::<Cuda<0>>::from_vec(vec![-1.0, 0.0, 1.0], [3])?;
    /// assert_eq!(t.lt_scalar(0.0)?.to_vec()?, vec![1, 0, 0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn lt_scalar(&self, value: T) -> Result<Tensor<D, u8>> {
        self.compare_scalar(CompareOp::Lt, value)
    }

    /// `x <= value` elementwise as 1 or 0.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu, u8>::from_vec(vec![0, 7, 8], [3])?;
    /// assert_eq!(t.le_scalar(7)?.to_vec()?, vec![1, 1, 0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn le_scalar(&self, value: T) -> Result<Tensor<D, u8>> {
        self.compare_scalar(CompareOp::Le, value)
    }

    /// `x > value` elementwise as 1 or 0.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let t = Tensor::<Cuda<0>, f64>::from_vec(vec![0.5, 2.5, f64::NAN], [3])?;
    /// assert_eq!(t.gt_scalar(1.0)?.to_vec()?, vec![0, 1, 0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn gt_scalar(&self, value: T) -> Result<Tensor<D, u8>> {
        self.compare_scalar(CompareOp::Gt, value)
    }

    /// `x >= value` elementwise as 1 or 0.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu, i32>::from_vec(vec![-2, 0, 2], [3])?;
    /// assert_eq!(t.ge_scalar(0)?.to_vec()?, vec![0, 1, 1]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn ge_scalar(&self, value: T) -> Result<Tensor<D, u8>> {
        self.compare_scalar(CompareOp::Ge, value)
    }

    /// `a` where `mask` is not 0, else `b`, elementwise (PyTorch's `torch.where(mask, a,
    /// b)`), the three broadcast to one shape under NumPy rules; the result is on the
    /// mask's placement. Placements are checked at compile time (at run time for `Dyn`).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let x = Tensor::<Cuda<0>>::from_vec(vec![-1.0, 2.0, -3.0, 4.0], [2, 2])?;
    /// let zero = Tensor::<Cuda<0>>::zeros([])?;
    /// let relu = Tensor::where_(&x.gt_scalar(0.0)?, &x, &zero)?;
    /// assert_eq!(relu.to_vec()?, vec![0.0, 2.0, 0.0, 4.0]);
    /// // A mask of one column picks whole rows.
    /// let rows = Tensor::<Cuda<0>, u8>::from_vec(vec![1, 0], [2, 1])?;
    /// let y = Tensor::<Cuda<0>>::full([2], 9.0)?;
    /// assert_eq!(Tensor::where_(&rows, &x, &y)?.to_vec()?, vec![-1.0, 2.0, 9.0, 9.0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    ///
    /// Operands on two static placements do not compile:
    ///
    /// ```text
    /// use locus::{Cpu, Cuda, Tensor};
    /// let m = Tensor::<Cuda<0>, u8>::ones([2]).unwrap();
    /// let a = Tensor::<Cuda<0>>::zeros([2]).unwrap();
    /// let b = Tensor::<Cpu>::zeros([2]).unwrap();
    /// let _ = Tensor::where_(&m, &a, &b); // tensors on `Cuda<0>` and `Cpu` cannot be used in one op
    /// ```
    pub fn where_<E, F>(mask: &Tensor<D, u8>, a: &Tensor<E, T>, b: &Tensor<F, T>) -> Result<Self>
    where
        E: Device + PlacedWith<D>,
        F: Device + PlacedWith<D>,
    {
        mask.same_device_as("where", a.device())?;
        mask.same_device_as("where", b.device())?;
        let (out_shape, strides) = shape::broadcast_all("where", &[&mask.shape, &a.shape, &b.shape], T::DTYPE)?;
        let strides = [&strides[0][..], &strides[1][..], &strides[2][..]];
        let buf = mask.queued("where_")?.select_where(a.buffer(), b.buffer(), T::DTYPE, &out_shape, strides)?;
        let out: Self = Tensor::from_buffer(mask.placement, buf, out_shape);
        Ok(a.track2(b, out, "where", |_| {
            let (m, sa, sb, a_at, b_at) = (mask.saved(), a.shape.clone(), b.shape.clone(), a.placement, b.placement);
            {
                move |g: Tensor<_, _>, [da, db]: [bool; 2]| {
                    let zero = Tensor::zeros_on(g.placement(), [])?;
                    let ga = da.then(|| Tensor::where_(&m, &g, &zero)?.sum_to(&sa)).transpose()?;
                    let gb = db.then(|| Tensor::where_(&m, &zero, &g)?.sum_to(&sb)).transpose()?;
                    Ok((ga.map(|x| x.placed(a_at)).transpose()?, gb.map(|x| x.placed(b_at)).transpose()?))
                }
            }
        }))
    }
}
