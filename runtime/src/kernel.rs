//! Launches of the user's own kernels, the run-time half of `#[locus::kernel]`.
//!
//! The macro checks a kernel's Rust signature against its CUDA C declaration when the
//! crate compiles, and turns the declaration into a fn that collects the arguments into
//! a [`KernelLaunch`]: scalars by value, `&Tensor`s as inputs, `&mut Tensor`s as outputs
//! written in place. `.launch()` then does what every op does: one device for all the
//! tensors (the types already say so for static placements; `Dyn` is checked here), the
//! thread's current stream of that device unless `.on(&stream)` names one, the inputs'
//! writers waited for, the outputs' earlier users too, and the outputs marked as written
//! by that stream. An output that shares its memory with another tensor is copied first
//! (copy on write, as `as_mut_slice` does), so the other tensor keeps its values.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::backend::api::user_kernel::{no_host_kernel, KernelArg, ScalarArg};
pub use crate::backend::api::user_kernel::{Grid, HostCall, HostKernel, KernelScalar, KernelSource};
use crate::backend::dispatch::current as current_stream;
use crate::backend::{self, AnyStream};
use crate::device::{Device, DeviceId};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::placement::SameStreamDevice;
use crate::storage::Storage;
use crate::stream::Stream;
use crate::tensor::Tensor;

/// One argument as collected, before the launch resolves it.
enum Arg<'a> {
    Scalar(ScalarArg),
    Input(&'a Arc<Storage>),
    Output(&'a mut Arc<Storage>),
}

/// A launch of a `#[locus::kernel]` fn with its arguments, on tensors placed on `D`; it
/// runs when [`launch`](KernelLaunch::launch) is called. By default it is queued on the
/// thread's current stream of the tensors' device, over [`Grid::linear`] of the first
/// output's element count (of the first tensor's when there is no output).
///
/// ```
/// # extern crate locus_runtime as locus;
/// # use locus::__private::{HostCall, KernelLaunch, KernelSource};
/// # use locus::{Device, Tensor};
/// # fn host_double(c: &mut HostCall<'_>) -> locus::Result<()> {
/// #     let (x, y) = (c.input::<f32>()?, c.output::<f32>()?);
/// #     y.iter_mut().zip(x).for_each(|(y, x)| *y = 2.0 * x);
/// #     Ok(())
/// # }
/// # static DOUBLE: KernelSource = KernelSource::new("double", "", "inline", Some(host_double));
/// # fn double<'a, D: Device>(x: &'a Tensor<D>, y: &'a mut Tensor<D>) -> KernelLaunch<'a, D> {
/// #     let mut l = KernelLaunch::new(&DOUBLE, 2);
/// #     l.input(x);
/// #     l.output(y);
/// #     l
/// # }
/// use locus::{Cuda, Grid, Stream};
/// // `double` as `#[locus::kernel(source = .., host = ..)] fn double<D: Device>(x: &Tensor<D>, y: &mut Tensor<D>);`
/// // declares it.
/// let x = Tensor::<Cuda<0>>::arange(0.0, 4.0, 1.0)?;
/// let mut y = Tensor::<Cuda<0>>::zeros([4])?;
/// double(&x, &mut y).launch()?;
/// assert_eq!(y.to_vec()?, vec![0.0, 2.0, 4.0, 6.0]);
///
/// let side = Stream::<Cuda<0>>::new()?;
/// double(&y.clone(), &mut y).grid(Grid::linear(4)).on(&side).launch()?;
/// assert_eq!(y.to_vec()?, vec![0.0, 4.0, 8.0, 12.0]);
/// # Ok::<(), locus::Error>(())
/// ```
#[must_use = "a kernel runs only when `.launch()` is called"]
pub struct KernelLaunch<'a, D: Device> {
    kernel: &'static KernelSource,
    args: Vec<Arg<'a>>,
    grid: Option<Grid>,
    stream: Option<(DeviceId, AnyStream)>,
    placement: PhantomData<D>,
}

impl<D: Device> std::fmt::Debug for KernelLaunch<'_, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KernelLaunch({}, {} arguments)", self.kernel.name, self.args.len())
    }
}

impl<'a, D: Device> KernelLaunch<'a, D> {
    /// A launch of `kernel`, which takes `params` arguments; the generated code pushes
    /// them in order.
    #[doc(hidden)]
    pub fn new(kernel: &'static KernelSource, params: usize) -> Self {
        KernelLaunch { kernel, args: Vec::with_capacity(params), grid: None, stream: None, placement: PhantomData }
    }

    /// The next parameter, a value.
    #[doc(hidden)]
    pub fn scalar<S: KernelScalar>(&mut self, value: S) {
        self.args.push(Arg::Scalar(ScalarArg::new(value)));
    }

    /// The next parameter, a `const T*` the kernel reads.
    #[doc(hidden)]
    pub fn input<P: Device, T: Element>(&mut self, t: &'a Tensor<P, T>) {
        self.args.push(Arg::Input(t.shared_storage()));
    }

    /// The next parameter, a `T*` the kernel may read and write.
    #[doc(hidden)]
    pub fn output<P: Device, T: Element>(&mut self, t: &'a mut Tensor<P, T>) {
        self.args.push(Arg::Output(t.storage_mut("a kernel launch")));
    }

    /// Launches over `grid` instead of the default [`Grid::linear`] of the first output.
    pub fn grid(self, grid: Grid) -> Self {
        KernelLaunch { grid: Some(grid), ..self }
    }

    /// Queues the launch on `stream` instead of the thread's current stream, as
    /// `on_stream(&stream, ..)` would. A stream of another device does not compile.
    pub fn on<S: Device>(self, stream: &Stream<S>) -> Self
    where
        D: SameStreamDevice<S>,
    {
        KernelLaunch { stream: Some((stream.device(), stream.raw.clone())), ..self }
    }

    /// The one device of the tensors, checked at run time for `Dyn` placements.
    fn device(&self) -> Result<DeviceId> {
        let name = self.kernel.name;
        let mut found: Option<DeviceId> = None;
        for arg in &self.args {
            let d = match arg {
                Arg::Scalar(_) => continue,
                Arg::Input(s) => s.device,
                Arg::Output(s) => s.device,
            };
            match found {
                None => found = Some(d),
                Some(first) if first != d => return Err(Error::DeviceMismatch { op: name, lhs: first, rhs: d }),
                Some(_) => {}
            }
        }
        let device = found.ok_or_else(|| Error::InvalidArgument {
            op: name,
            reason: "a kernel needs a tensor argument: the tensors' device is where it runs".into(),
        })?;
        if device.is_host() {
            return Err(Error::InvalidArgument {
                op: name,
                reason: format!(
                    "its tensors are in {device} memory, and a CUDA kernel runs on a cuda device; copy them there \
                     first (`.to::<Cuda<0>>()`)"
                ),
            });
        }
        Ok(device)
    }

    /// The default grid: one thread per element of the first output (or tensor).
    fn default_grid(&self) -> Grid {
        let first_output = self.args.iter().find_map(|a| match a {
            Arg::Output(s) => Some(s.len),
            _ => None,
        });
        let first_tensor = self.args.iter().find_map(|a| match a {
            Arg::Input(s) => Some(s.len),
            _ => None,
        });
        Grid::linear(first_output.or(first_tensor).unwrap_or(0))
    }

    /// Queues the kernel. Errors: tensors on two devices (`Dyn`) or on a host placement, a
    /// stream of another device, a grid over CUDA's limits, a kernel NVRTC cannot compile
    /// (`Error::Kernel`, with the compiler's log), a launch the driver refuses, and on the
    /// host backend a kernel without a Rust fallback (`Error::NoHostKernel`). A grid with
    /// no blocks (the default one for empty outputs) launches nothing.
    pub fn launch(self) -> Result<()> {
        let name = self.kernel.name;
        let device = self.device()?;
        let backend = backend::for_device(device)?;
        if backend.name() == "host" && self.kernel.host.is_none() {
            return Err(no_host_kernel(self.kernel));
        }
        let grid = match self.grid {
            Some(g) => g,
            None => self.default_grid(),
        };
        grid.check(name)?;
        let stream = match self.stream {
            Some((d, _)) if d != device => return Err(Error::DeviceMismatch { op: name, lhs: device, rhs: d }),
            Some((_, s)) => s,
            None => match current_stream::current(device) {
                Some(s) => s,
                None => backend.default_stream(device)?,
            },
        };
        if grid.is_empty() {
            return Ok(());
        }
        let mut args = Vec::with_capacity(self.args.len());
        for arg in self.args {
            args.push(match arg {
                Arg::Scalar(v) => KernelArg::Scalar(v),
                Arg::Input(s) => KernelArg::Read(&s.buf, s.dtype),
                Arg::Output(s) => {
                    if Arc::get_mut(s).is_none() {
                        // Shared memory: this tensor gets a copy of its own, on the stream
                        // the kernel runs on, and the others keep theirs.
                        let copy = current_stream::with_current(device, stream.clone(), || s.copy_to(device))?;
                        *s = Arc::new(copy);
                    }
                    let own = Arc::get_mut(s).ok_or_else(|| Error::InvalidArgument {
                        op: name,
                        reason: "an output's memory is still shared after its copy".into(),
                    })?;
                    let dtype = own.dtype;
                    // A write in place: the contents get a new id.
                    KernelArg::Write(own.buf_mut(), dtype)
                }
            });
        }
        backend.launch_kernel(device, self.kernel, &stream, grid, &args)
    }
}

/// What a `#[locus::kernel]` fn that did not compile returns, so that its callers report
/// no errors of their own. Never launched: the crate does not build.
#[doc(hidden)]
#[derive(Debug)]
pub struct KernelFallback;

impl KernelFallback {
    /// As [`KernelLaunch::grid`].
    pub fn grid(self, _: Grid) -> Self {
        self
    }

    /// As [`KernelLaunch::on`].
    pub fn on<S: Device>(self, _: &Stream<S>) -> Self {
        self
    }

    /// As [`KernelLaunch::launch`]: an error, as the kernel's declaration was rejected.
    pub fn launch(self) -> Result<()> {
        Err(Error::InvalidArgument { op: "kernel", reason: "the #[locus::kernel] declaration did not compile".into() })
    }
}
