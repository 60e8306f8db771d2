//! The way in and out for code written against cudarc or raw CUDA: a device tensor lent
//! to that code for work queued on a locus stream ([`Tensor::raw_view`],
//! [`Tensor::raw_view_mut`]), and memory that code allocated taken in as a tensor
//! ([`Tensor::from_raw_parts`]).
//!
//! The contract is the one of locus's own ops, made explicit: locus orders the memory for
//! the stream before it lends it (the stream waits for the last write, and for a write
//! also for every read since), the borrowed work is queued on that stream while the view
//! lives, and a write view marks the stream as the writer when it ends, so that later
//! readers on other streams wait for it. The memory is freed only after the stream's
//! work. Driver types stay inside the cuda backend: addresses are `u64` (cudarc's
//! `CUdeviceptr`) and the stream is a `*mut c_void` (cudarc's `CUstream`, which
//! `CudaContext::wrap_borrowed_stream` takes).
//!
//! On the host backend a simulated device's memory is host memory: the same calls give
//! host addresses, and the host first waits for the stream, so host code may stand for
//! the stream's work while the view lives. That is how CI tests this module.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::backend::{self, dispatch::capture, AnyStream, Buffer, Release};
use crate::device::{Device, DeviceId};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::placement::SameStreamDevice;
use crate::shape::Shape;
use crate::stream::Stream;
use crate::tensor::Tensor;

/// A device tensor lent for reading by work queued on one stream. See
/// [`Tensor::raw_view`].
#[derive(Debug)]
pub struct RawView<'a, T: Element> {
    addr: u64,
    len: usize,
    device: DeviceId,
    stream: usize,
    _tensor: PhantomData<&'a [T]>,
}

/// A device tensor lent for reading and writing by work queued on one stream. Its drop
/// (or [`RawViewMut::finish`]) marks that stream as the tensor's writer. See
/// [`Tensor::raw_view_mut`].
#[derive(Debug)]
pub struct RawViewMut<'a, T: Element> {
    addr: u64,
    len: usize,
    device: DeviceId,
    stream: AnyStream,
    buf: &'a Buffer,
    finished: bool,
    _tensor: PhantomData<&'a mut [T]>,
}

macro_rules! view_accessors {
    () => {
        /// The address of the first element: a device address (`CUdeviceptr`) on the
        /// cuda backend, a host address on the host backend.
        pub fn device_ptr(&self) -> u64 {
            self.addr
        }

        /// The number of elements.
        pub fn len(&self) -> usize {
            self.len
        }

        /// Whether the tensor has no elements (then [`Self::device_ptr`] may be 0).
        pub fn is_empty(&self) -> bool {
            self.len == 0
        }

        /// The number of bytes.
        pub fn bytes(&self) -> usize {
            self.len * std::mem::size_of::<T>()
        }

        /// The device the memory is on.
        pub fn device(&self) -> DeviceId {
            self.device
        }
    };
}

impl<T: Element> RawView<'_, T> {
    view_accessors!();

    /// The stream to queue the reading work on: the driver's `CUstream` on the cuda
    /// backend (for cudarc's `CudaContext::wrap_borrowed_stream`, or any driver call that
    /// takes a stream); an opaque token on the host backend.
    pub fn stream_handle(&self) -> *mut c_void {
        self.stream as *mut c_void
    }
}

impl<T: Element> RawViewMut<'_, T> {
    view_accessors!();

    /// The stream to queue the work on, as [`RawView::stream_handle`].
    pub fn stream_handle(&self) -> *mut c_void {
        self.stream.handle() as *mut c_void
    }

    /// Ends the loan and marks the write: later uses on other streams wait for the work
    /// queued on the view's stream so far. The drop does the same, and if marking the
    /// write fails there, it waits on the host for the stream instead; `finish` returns
    /// that error.
    pub fn finish(mut self) -> Result<()> {
        self.end()
    }

    fn end(&mut self) -> Result<()> {
        if std::mem::replace(&mut self.finished, true) {
            return Ok(());
        }
        match self.buf.after_write(&self.stream) {
            Ok(()) => Ok(()),
            Err(e) => {
                // Unmarked, the write must at least be over before anyone else looks.
                if let Ok(b) = backend::for_device_now(self.device) {
                    let _ = b.sync_stream(&self.stream);
                }
                Err(e)
            }
        }
    }
}

impl<T: Element> Drop for RawViewMut<'_, T> {
    fn drop(&mut self) {
        let _ = self.end();
    }
}

/// Lent memory is device memory: host placements have `as_slice` and `as_mut_slice`.
fn check_lendable(op: &'static str, tensor: DeviceId, stream: DeviceId) -> Result<()> {
    if tensor != stream {
        return Err(Error::DeviceMismatch { op, lhs: tensor, rhs: stream });
    }
    if tensor.is_host() {
        return Err(Error::InvalidArgument {
            op,
            reason: format!("the tensor is on {tensor}, host memory; read it with .as_slice() or .as_mut_slice()"),
        });
    }
    Ok(())
}

impl<D: Device, T: Element> Tensor<D, T> {
    /// Lends this device tensor to code outside locus (cudarc, raw CUDA) that reads it
    /// with work queued on `stream`: its address, length and the stream's handle. Before
    /// it returns, `stream` waits for the tensor's last write (an event, no host wait),
    /// and the memory is freed only after `stream`'s work, so the reading work may run
    /// any time after the view is made. The view borrows the tensor: it cannot be
    /// written or dropped meanwhile.
    ///
    /// On the host backend the address is host memory and the host waits for `stream`
    /// first, so host code may read it while the view lives.
    ///
    /// # Safety
    /// - Work that uses the memory is queued on `stream` only (or on streams ordered
    ///   after it, with the view still alive), and only while the view lives: after the
    ///   view ends nothing may be queued that touches the memory.
    /// - That work only reads the memory, and only `len()` elements from `device_ptr()`.
    /// - The address is of the tensor's device; use it with the driver context of that
    ///   device (the primary context, which cudarc's `CudaContext::new(ordinal)` retains).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Stream, Tensor};
    /// let s = Stream::<Cuda<0>>::new()?;
    /// let x = Tensor::<Cuda<0>>::arange(0.0, 4.0, 1.0)?;
    /// // SAFETY: only host code below reads the memory, on the host backend, where the
    /// // host has waited for `s`; nothing is queued on `s` after the view ends.
    /// let view = unsafe { x.raw_view(&s)? };
    /// assert_eq!((view.len(), view.bytes(), view.device().to_string()), (4, 16, "cuda:0".into()));
    /// if locus::backend_name()? == "host" {
    ///     // SAFETY: on the host backend the address is 4 f32 of host memory, alive and
    ///     // unwritten while the view borrows `x`.
    ///     let seen = unsafe { std::slice::from_raw_parts(view.device_ptr() as *const f32, view.len()) };
    ///     assert_eq!(seen, &[0.0, 1.0, 2.0, 3.0]);
    /// }
    /// # Ok::<(), locus::Error>(())
    /// ```
    ///
    /// With cudarc, the same view feeds a kernel launched on the locus stream:
    ///
    /// ```no_run
    /// # extern crate locus_runtime as locus;
    /// use cudarc::driver::{sys::CUstream, CudaContext, LaunchConfig, PushKernelArg};
    /// use locus::{Cuda, Stream, Tensor};
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// const SRC: &str = r#"extern "C" __global__ void sum(const float* x, unsigned n, float* out) {
    ///     for (unsigned i = 0; i < n; i++) *out += x[i]; }"#;
    /// let ctx = CudaContext::new(0)?; // the primary context, the one locus uses
    /// let f = ctx.load_module(cudarc::nvrtc::compile_ptx(SRC)?)?.load_function("sum")?;
    /// let s = Stream::<Cuda<0>>::new()?;
    /// let x = Tensor::<Cuda<0>>::ones([1024])?;
    /// let mut out = Tensor::<Cuda<0>>::zeros([1])?;
    /// {
    ///     // SAFETY: the kernel reads `x` and writes `out` within their lengths, and is
    ///     // queued on `s` while both views live.
    ///     let (xv, ov) = unsafe { (x.raw_view(&s)?, out.raw_view_mut(&s)?) };
    ///     // SAFETY: the handle is a live stream of the context's device, kept alive by `s`.
    ///     let cs = unsafe { ctx.wrap_borrowed_stream(xv.stream_handle() as CUstream) };
    ///     let (xp, n, op) = (xv.device_ptr(), xv.len() as u32, ov.device_ptr());
    ///     let mut launch = cs.launch_builder(&f);
    ///     launch.arg(&xp).arg(&n).arg(&op);
    ///     // SAFETY: the arguments match the kernel's signature.
    ///     unsafe { launch.launch(LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 }) }?;
    /// } // `ov` ends: later readers of `out` on other streams wait for the kernel
    /// assert_eq!(out.item()?, 1024.0);
    /// # Ok(()) }
    /// ```
    pub unsafe fn raw_view<'a, E>(&'a self, stream: &'a Stream<E>) -> Result<RawView<'a, T>>
    where
        E: Device,
        D: SameStreamDevice<E>,
    {
        check_lendable("raw_view", self.device(), stream.device())?;
        let addr = self.buffer().lend(&stream.raw, false)?;
        Ok(RawView {
            addr,
            len: self.numel(),
            device: self.device(),
            stream: stream.raw.handle(),
            _tensor: PhantomData,
        })
    }

    /// Lends this device tensor to code outside locus that reads and writes it with
    /// work queued on `stream`, as [`Tensor::raw_view`] does for reading. Before it
    /// returns, `stream` waits for the last write and for every read since; when the
    /// view ends (drop, or [`RawViewMut::finish`]) `stream` becomes the tensor's writer,
    /// so later uses on other streams wait for the work queued on it. A tensor that
    /// shares its memory with clones gets a copy of its own first (copy on write), so
    /// the clones keep their values.
    ///
    /// # Safety
    /// As for [`Tensor::raw_view`], except that the work may also write the `len()`
    /// elements; and every write must be queued on `stream` before the view ends.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Stream, Tensor};
    /// let s = Stream::<Cuda<0>>::new()?;
    /// let mut x = Tensor::<Cuda<0>, i32>::zeros([3])?;
    /// let before = x.clone();
    /// if locus::backend_name()? == "host" {
    ///     // SAFETY: host code stands for `s`'s work on the host backend, where the host
    ///     // has waited for `s`; it writes 3 i32 while the view lives.
    ///     let view = unsafe { x.raw_view_mut(&s)? };
    ///     // SAFETY: 3 i32 of host memory that only this view reaches (copied on write
    ///     // away from `before`).
    ///     let data = unsafe { std::slice::from_raw_parts_mut(view.device_ptr() as *mut i32, view.len()) };
    ///     data.copy_from_slice(&[7, 8, 9]);
    ///     view.finish()?;
    ///     assert_eq!(x.to_vec()?, vec![7, 8, 9]);
    /// }
    /// assert_eq!(before.to_vec()?, vec![0, 0, 0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub unsafe fn raw_view_mut<'a, E>(&'a mut self, stream: &'a Stream<E>) -> Result<RawViewMut<'a, T>>
    where
        E: Device,
        D: SameStreamDevice<E>,
    {
        let (len, device) = (self.numel(), self.device());
        check_lendable("raw_view_mut", device, stream.device())?;
        capture::refuse(
            "raw_view_mut",
            "code outside locus cannot be recorded into a graph; take the view outside the capture",
        )?;
        if Arc::get_mut(self.storage_mut("RawViewMut")).is_none() {
            let copy = self.storage().copy_to(self.device())?;
            *self.storage_mut("RawViewMut") = Arc::new(copy);
        }
        let Some(storage) = Arc::get_mut(self.storage_mut("RawViewMut")) else {
            return Err(Error::InvalidArgument { op: "raw_view_mut", reason: "the tensor's memory is shared".into() });
        };
        // A new contents id: copies made from the old contents are stale now.
        let buf: &'a Buffer = storage.buf_mut();
        let addr = buf.lend(&stream.raw, true)?;
        Ok(RawViewMut { addr, len, device, stream: stream.raw.clone(), buf, finished: false, _tensor: PhantomData })
    }

    /// Takes memory allocated outside locus (by cudarc, raw CUDA, another library) as a
    /// tensor of `shape` on the device of `stream`, without a copy. The memory's last
    /// write is taken to be the work queued on `stream` so far: ops on other streams wait
    /// for it. When the tensor and every use of its memory are over, locus waits for
    /// those uses to finish (the host waits for `stream`, after `stream` waited for the
    /// other streams that used it) and then calls `release` on some thread, once, to give
    /// the memory back (drop a cudarc `CudaSlice` captured by it, call `cuMemFree`, ...).
    /// If the end of those uses cannot be known (a failed wait, a lost context), `release`
    /// is never called rather than called too early.
    ///
    /// On `Err` the memory is given back the same way: `release` runs once `stream`'s
    /// work is done (or never, if that cannot be known, as during a graph capture).
    ///
    /// On the host backend `ptr` is a host address (how tests wrap a `Vec`).
    ///
    /// # Safety
    /// - `ptr` is the address of `shape`'s element count of `T` on the device of
    ///   `stream` (device memory of that device's context on the cuda backend, host
    ///   memory on the host backend), aligned for `T`, and stays valid until `release`
    ///   is called.
    /// - From this call until `release` is called, nothing but the tensor uses the memory:
    ///   no work outside locus reads or writes it, except work queued on `stream` before
    ///   this call (or lent views, under their own contract).
    /// - The memory holds valid values of `T` once that earlier work is done (every bit
    ///   pattern is one for locus's element types, so initialised memory suffices).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// use std::sync::Arc;
    /// use locus::{Cuda, Stream, Tensor};
    /// if locus::backend_name()? == "host" {
    ///     let s = Stream::<Cuda<0>>::default_stream()?;
    ///     let data: &'static mut [f32] = Box::leak(vec![1.0, 2.0, 3.0, 4.0].into_boxed_slice());
    ///     let addr = data.as_mut_ptr() as usize;
    ///     let freed = Arc::new(AtomicBool::new(false));
    ///     let flag = Arc::clone(&freed);
    ///     let release = move || {
    ///         // SAFETY: `addr` is the leaked box of 4 f32, given back once, here.
    ///         drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(addr as *mut f32, 4)) });
    ///         flag.store(true, Ordering::SeqCst);
    ///     };
    ///     // SAFETY: 4 aligned f32 of host memory (the host backend's device memory), used
    ///     // by nothing else until `release` runs.
    ///     let t = unsafe { Tensor::<Cuda<0>>::from_raw_parts(addr as u64, [2, 2], &s, release)? };
    ///     assert_eq!((&t * 2.0)?.to_vec()?, vec![2.0, 4.0, 6.0, 8.0]);
    ///     drop(t);
    ///     locus::synchronize("cuda:0".parse()?)?;
    ///     assert!(freed.load(Ordering::SeqCst));
    /// }
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub unsafe fn from_raw_parts(
        ptr: u64,
        shape: impl AsRef<[usize]>,
        stream: &Stream<D>,
        release: impl FnOnce() + Send + 'static,
    ) -> Result<Self> {
        let release = Release::new(release);
        let placement = stream.placement();
        let device = placement.id();
        if capture::refuse("from_raw_parts", "").is_err() {
            release.leak();
            return Err(Error::NotCapturable {
                op: "from_raw_parts",
                reason: "memory made outside locus cannot join a graph while it is captured; wrap it before the \
                         capture"
                    .into(),
            });
        }
        // Refused before locus holds the memory: it goes back once the owner's work is done.
        let refuse = |e: Error, release: Release| {
            match backend::for_device_now(device).and_then(|b| b.sync_stream(&stream.raw)) {
                Ok(()) => release.run(),
                Err(_) => release.leak(),
            }
            Err(e)
        };
        let shape = match Shape::new("from_raw_parts", shape.as_ref(), T::DTYPE) {
            Ok(s) => s,
            Err(e) => return refuse(e, release),
        };
        let bad = |reason: String| Error::InvalidArgument { op: "from_raw_parts", reason };
        if device.is_host() {
            let e = bad(format!("{device} is host memory; use Tensor::from_vec for host data"));
            return refuse(e, release);
        }
        let bytes = shape.numel() * T::DTYPE.size();
        if bytes > 0 && ptr == 0 {
            return refuse(bad(format!("a null address cannot hold {bytes} bytes")), release);
        }
        if ptr % std::mem::align_of::<T>() as u64 != 0 {
            let e = bad(format!("address {ptr:#x} is not aligned for {} ({} bytes)", T::DTYPE, T::DTYPE.size()));
            return refuse(e, release);
        }
        let b = match backend::for_device(device) {
            Ok(b) => b,
            Err(e) => return refuse(e, release),
        };
        // SAFETY: this fn's contract: `ptr` holds `bytes` bytes of `device`, aligned,
        // valid until `release` runs and used by nothing else but `stream`'s earlier work.
        let buf = unsafe { b.wrap(device, ptr, bytes, &stream.raw, release)? };
        Ok(Tensor::from_buffer(placement, buf, shape))
    }
}
