//! Making tensors: zeros, ones, full, from data, ranges and seeded random values
//! (uniform and standard normal).

use super::Tensor;
use crate::backend::{self, Buffer, Dist};
use crate::device::{Device, StaticDevice};
use crate::element::{DType, Element, Float};
use crate::error::{Error, Result};
use crate::shape::Shape;

impl<D: Device, T: Element> Tensor<D, T> {
    fn make(
        device: D,
        op: &'static str,
        shape: &[usize],
        f: impl FnOnce(backend::AnyBackend, usize) -> Result<Buffer>,
    ) -> Result<Self> {
        let shape = Shape::new(op, shape, T::DTYPE)?;
        crate::stream::check_op_stream(op, device.id())?;
        let buf = f(backend::for_device(device.id())?, shape.numel())?;
        Ok(Self::from_buffer(device, buf, shape))
    }

    fn filled(device: D, op: &'static str, shape: &[usize], value: T) -> Result<Self> {
        let id = device.id();
        Self::make(device, op, shape, |b, len| b.fill(id, T::DTYPE, len, value.to_scalar()))
    }

    /// Zeros of `shape` on `device`.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Dyn, Tensor};
    /// let t = Tensor::<Dyn>::zeros_on(Dyn::new("cuda:0".parse()?), [2])?;
    /// assert_eq!(t.to_vec()?, vec![0.0, 0.0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn zeros_on(device: D, shape: impl AsRef<[usize]>) -> Result<Self> {
        Self::filled(device, "zeros", shape.as_ref(), T::ZERO)
    }

    /// Ones of `shape` on `device`.
    pub fn ones_on(device: D, shape: impl AsRef<[usize]>) -> Result<Self> {
        Self::filled(device, "ones", shape.as_ref(), T::ONE)
    }

    /// `value` everywhere in `shape` on `device`.
    pub fn full_on(device: D, shape: impl AsRef<[usize]>, value: T) -> Result<Self> {
        Self::filled(device, "full", shape.as_ref(), value)
    }

    /// `data` (row-major) as a tensor of `shape` on `device`.
    pub fn from_slice_on(device: D, data: &[T], shape: impl AsRef<[usize]>) -> Result<Self> {
        Self::from_data("from_slice", device, data, shape.as_ref())
    }

    /// `data` (row-major) as a tensor of `shape` on `device`.
    pub fn from_vec_on(device: D, data: Vec<T>, shape: impl AsRef<[usize]>) -> Result<Self> {
        Self::from_data("from_vec", device, &data, shape.as_ref())
    }

    /// `data` as a tensor of `shape`; errors name `op`, the function the user called.
    fn from_data(op: &'static str, device: D, data: &[T], shape: &[usize]) -> Result<Self> {
        let shape = Shape::new(op, shape, T::DTYPE)?;
        if shape.numel() != data.len() {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("{} elements do not fill shape {:?} ({} elements)", data.len(), &*shape, shape.numel()),
            });
        }
        let buf = backend::for_device(device.id())?.upload(device.id(), bytemuck::cast_slice(data))?;
        Ok(Self::from_buffer(device, buf, shape))
    }

    /// `start, start + step, …` up to but not including `end`, on `device`. The values
    /// are computed in f64, so an `i64` range must start and end within ±2^52 (an `Err`
    /// otherwise).
    pub fn arange_on(device: D, start: T, end: T, step: T) -> Result<Self> {
        let (s, e, st) = (start.to_f64(), end.to_f64(), step.to_f64());
        let bad = |reason: &str| Error::InvalidArgument { op: "arange", reason: reason.into() };
        if st == 0.0 || !st.is_finite() || !s.is_finite() || !e.is_finite() {
            return Err(bad("start, end and step must be finite and step non-zero"));
        }
        if (e - s) * st < 0.0 {
            return Err(bad("the step goes away from end"));
        }
        // The values are computed in f64: exact while start and end lie within ±2^52
        // (then every `start + i * step` and `i * step` does).
        const EXACT: f64 = (1u64 << 52) as f64;
        if T::DTYPE == DType::I64 && (s.abs() > EXACT || e.abs() > EXACT) {
            return Err(bad("an i64 arange is computed in f64: start and end must lie within ±2^52"));
        }
        let n = ((e - s) / st).ceil();
        if n > usize::MAX as f64 / 2.0 {
            return Err(bad("too many elements"));
        }
        let n = n as usize;
        let id = device.id();
        Self::make(device, "arange", &[n], |b, len| b.arange(id, T::DTYPE, len, s, st))
    }
}

impl<D: Device, T: Float> Tensor<D, T> {
    /// Uniform values in `[0, 1)` on `device`, the same for the same `seed` on every
    /// device and backend.
    pub fn rand_on(device: D, shape: impl AsRef<[usize]>, seed: u64) -> Result<Self> {
        let id = device.id();
        Self::make(device, "rand", shape.as_ref(), |b, len| b.rand(id, T::DTYPE, len, seed, Dist::Uniform))
    }

    /// Standard normal values (mean 0, standard deviation 1) on `device`, reproducible
    /// from `seed`; see [`Tensor::randn`].
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Dyn, Tensor};
    /// let t = Tensor::<Dyn, f64>::randn_on(Dyn::new("cpu".parse()?), [2, 3], 1)?;
    /// assert_eq!(t.shape(), &[2, 3]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn randn_on(device: D, shape: impl AsRef<[usize]>, seed: u64) -> Result<Self> {
        let id = device.id();
        Self::make(device, "randn", shape.as_ref(), |b, len| b.rand(id, T::DTYPE, len, seed, Dist::Normal))
    }
}

impl<D: StaticDevice, T: Element> Tensor<D, T> {
    /// Zeros of `shape`.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let t = Tensor::<Cuda<0>, i32>::zeros([2, 2])?;
    /// assert_eq!(t.to_vec()?, vec![0; 4]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn zeros(shape: impl AsRef<[usize]>) -> Result<Self> {
        Self::zeros_on(D::resolve()?, shape)
    }

    /// Ones of `shape`.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// assert_eq!(Tensor::<Cpu, u8>::ones([3])?.to_vec()?, vec![1, 1, 1]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn ones(shape: impl AsRef<[usize]>) -> Result<Self> {
        Self::ones_on(D::resolve()?, shape)
    }

    /// `value` everywhere in `shape`.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// assert_eq!(Tensor::<Cpu, f64>::full([2], 0.5)?.to_vec()?, vec![0.5, 0.5]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn full(shape: impl AsRef<[usize]>, value: T) -> Result<Self> {
        Self::full_on(D::resolve()?, shape, value)
    }

    /// `data` (row-major) as a tensor of `shape`; the lengths must agree.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Tensor};
    /// let t = Tensor::<Cuda<0>>::from_vec(vec![1.0, 2.0], [2, 1])?;
    /// assert_eq!(t.shape(), &[2, 1]);
    /// assert!(Tensor::<Cuda<0>>::from_vec(vec![1.0], [2]).is_err());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn from_vec(data: Vec<T>, shape: impl AsRef<[usize]>) -> Result<Self> {
        Self::from_vec_on(D::resolve()?, data, shape)
    }

    /// A copy of `data` (row-major) as a tensor of `shape`.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Pinned, Tensor};
    /// let t = Tensor::<Pinned, i32>::from_slice(&[1, 2, 3], [3])?;
    /// assert_eq!(t.to_vec()?, vec![1, 2, 3]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn from_slice(data: &[T], shape: impl AsRef<[usize]>) -> Result<Self> {
        Self::from_slice_on(D::resolve()?, data, shape)
    }

    /// `start, start + step, …` up to but not including `end` (1-D).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// assert_eq!(Tensor::<Cpu>::arange(0.0, 1.0, 0.25)?.to_vec()?, vec![0.0, 0.25, 0.5, 0.75]);
    /// assert!(Tensor::<Cpu>::arange(0.0, 1.0, 0.0).is_err());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn arange(start: T, end: T, step: T) -> Result<Self> {
        Self::arange_on(D::resolve()?, start, end, step)
    }
}

impl<D: StaticDevice, T: Float> Tensor<D, T> {
    /// Uniform values in `[0, 1)`, reproducible from `seed` on every device and backend.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Cuda, Tensor};
    /// let a = Tensor::<Cuda<0>>::rand([4], 7)?.to_vec()?;
    /// let b = Tensor::<Cpu>::rand([4], 7)?.to_vec()?;
    /// assert_eq!(a, b);
    /// assert!(a.iter().all(|v| (0.0..1.0).contains(v)));
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn rand(shape: impl AsRef<[usize]>, seed: u64) -> Result<Self> {
        Self::rand_on(D::resolve()?, shape, seed)
    }

    /// Standard normal values (mean 0, standard deviation 1), PyTorch's `torch.randn`
    /// with a seed of its own: the same `seed` gives the same values on a backend every
    /// time, and element `i` depends on `seed` and `i` alone, not on the shape. Made by
    /// Box-Muller in f64 from the counter-based bits `rand` uses (a stream of its own, not
    /// `rand`'s values) and rounded once to `T`; every value lies within ±8.6. The host
    /// and the GPU compute the same expression with their own f64 `log`, `cos` and `sin`,
    /// so they agree to f64's last bits, and after rounding to f32 or a 16-bit type
    /// almost always exactly.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let a = Tensor::<Cpu>::randn([1000], 7)?;
    /// assert_eq!(a.to_vec()?, Tensor::<Cpu>::randn([1000], 7)?.to_vec()?);
    /// assert_ne!(a.to_vec()?, Tensor::<Cpu>::randn([1000], 8)?.to_vec()?);
    /// assert!(a.mean()?.item()?.abs() < 0.1);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn randn(shape: impl AsRef<[usize]>, seed: u64) -> Result<Self> {
        Self::randn_on(D::resolve()?, shape, seed)
    }
}
