//! `Tensor<Dyn>` factories on the current device: the innermost guard of this thread
//! (`#[on_device(dyn r)]`, `with_device!`, `DeviceGuard`), or the cpu when none is set,
//! as PyTorch's factories follow `torch.cuda.device`. A placement given explicitly
//! (`zeros_on`, `to_dyn`) always wins over the guard.

use super::Tensor;
use crate::device::Dyn;
use crate::element::{Element, Float};
use crate::error::Result;
use crate::guard::current_device;

fn here() -> Dyn {
    Dyn::new(current_device())
}

impl<T: Element> Tensor<Dyn, T> {
    /// Zeros of `shape` on the current device.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{DeviceGuard, DeviceId, Dyn, Tensor};
    /// assert_eq!(Tensor::<Dyn>::zeros_current([2])?.device(), DeviceId::Cpu);
    /// let _g = DeviceGuard::enter(DeviceId::Cuda(0))?;
    /// let t = Tensor::<Dyn>::zeros_current([2])?;
    /// assert_eq!(t.device(), DeviceId::Cuda(0));
    /// assert_eq!(t.to_vec()?, vec![0.0, 0.0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn zeros_current(shape: impl AsRef<[usize]>) -> Result<Self> {
        Self::zeros_on(here(), shape)
    }

    /// Ones of `shape` on the current device.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{DeviceGuard, DeviceId, Dyn, Tensor};
    /// let t = DeviceGuard::run(DeviceId::Cuda(0), || Tensor::<Dyn, i32>::ones_current([2]))??;
    /// assert_eq!((t.device(), t.to_vec()?), (DeviceId::Cuda(0), vec![1, 1]));
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn ones_current(shape: impl AsRef<[usize]>) -> Result<Self> {
        Self::ones_on(here(), shape)
    }

    /// `value` everywhere in `shape` on the current device.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{DeviceGuard, DeviceId, Dyn, Tensor};
    /// let _g = DeviceGuard::enter(DeviceId::Pinned)?;
    /// let t = Tensor::<Dyn, f64>::full_current([1], 2.5)?;
    /// assert_eq!((t.device(), t.item()?), (DeviceId::Pinned, 2.5));
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn full_current(shape: impl AsRef<[usize]>, value: T) -> Result<Self> {
        Self::full_on(here(), shape, value)
    }

    /// `data` (row-major) as a tensor of `shape` on the current device.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{DeviceGuard, DeviceId, Dyn, Tensor};
    /// let _g = DeviceGuard::enter(DeviceId::Cuda(0))?;
    /// let t = Tensor::<Dyn>::from_vec_current(vec![1.0, 2.0], [2, 1])?;
    /// assert_eq!((t.device(), t.shape()), (DeviceId::Cuda(0), &[2, 1][..]));
    /// assert!(Tensor::<Dyn>::from_vec_current(vec![1.0], [2]).is_err());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn from_vec_current(data: Vec<T>, shape: impl AsRef<[usize]>) -> Result<Self> {
        Self::from_vec_on(here(), data, shape)
    }

    /// A copy of `data` (row-major) as a tensor of `shape` on the current device.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Dyn, Tensor};
    /// let t = Tensor::<Dyn, u8>::from_slice_current(&[7, 8], [2])?;
    /// assert_eq!(t.to_vec()?, vec![7, 8]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn from_slice_current(data: &[T], shape: impl AsRef<[usize]>) -> Result<Self> {
        Self::from_slice_on(here(), data, shape)
    }

    /// `start, start + step, …` up to but not including `end`, on the current device.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{DeviceGuard, DeviceId, Dyn, Tensor};
    /// let _g = DeviceGuard::enter(DeviceId::Cuda(0))?;
    /// let t = Tensor::<Dyn, i32>::arange_current(0, 3, 1)?;
    /// assert_eq!((t.device(), t.to_vec()?), (DeviceId::Cuda(0), vec![0, 1, 2]));
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn arange_current(start: T, end: T, step: T) -> Result<Self> {
        Self::arange_on(here(), start, end, step)
    }
}

impl<T: Float> Tensor<Dyn, T> {
    /// Uniform values in `[0, 1)` on the current device, the same for the same `seed`
    /// on every device and backend.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, DeviceGuard, DeviceId, Dyn, Tensor};
    /// let _g = DeviceGuard::enter(DeviceId::Cuda(0))?;
    /// let t = Tensor::<Dyn>::rand_current([3], 9)?;
    /// assert_eq!(t.device(), DeviceId::Cuda(0));
    /// assert_eq!(t.to_vec()?, Tensor::<Cpu>::rand([3], 9)?.to_vec()?);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn rand_current(shape: impl AsRef<[usize]>, seed: u64) -> Result<Self> {
        Self::rand_on(here(), shape, seed)
    }

    /// Standard normal values on the current device, reproducible from `seed` (see
    /// [`Tensor::randn`]).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{DeviceGuard, DeviceId, Dyn, Tensor};
    /// let _g = DeviceGuard::enter(DeviceId::Cuda(0))?;
    /// let t = Tensor::<Dyn, f64>::randn_current([3], 9)?;
    /// assert_eq!((t.device(), t.shape()), (DeviceId::Cuda(0), &[3][..]));
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn randn_current(shape: impl AsRef<[usize]>, seed: u64) -> Result<Self> {
        Self::randn_on(here(), shape, seed)
    }
}
