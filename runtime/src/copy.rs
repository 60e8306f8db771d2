//! Copies that need page-locked memory: `pin_memory`, asynchronous host-to-device
//! copies that borrow their source until done, and device-to-host copies that land in a
//! [`Pending`] tensor.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::backend::{self, host, AnyEvent, AnyStream, Buffer, HostBuffer};
use crate::device::{Cpu, Device, DeviceId, Pinned, StaticDevice};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::placement::SameStreamDevice;
use crate::storage::Storage;
use crate::stream::Stream;
use crate::tensor::Tensor;

/// Placements an asynchronous copy can start from: page-locked memory only, since the
/// device reads it while the host goes on.
#[diagnostic::on_unimplemented(
    message = "`to_async` copies only from page-locked memory, and `{Self}` is pageable",
    label = "this tensor is in pageable memory",
    note = "call `.pin_memory()` first to get a `Tensor<Pinned>`, or copy synchronously with `.to::<Cuda<N>>()`"
)]
pub trait AsyncSource: Device {}
impl AsyncSource for Pinned {}

/// An asynchronous host-to-device copy in flight. The device tensor can be used at once
/// (work on the copy's stream is ordered after it; other streams wait for it), while the
/// pinned source stays borrowed until the copy has completed: moving, mutating or
/// dropping the source before [`Transfer::wait`] does not compile. Dropping the transfer
/// waits for the copy.
#[must_use = "a transfer borrows its source until waited; call .wait()"]
pub struct Transfer<'src, D: Device, T: Element> {
    tensor: Option<Tensor<D, T>>,
    done: AnyEvent,
    _source: PhantomData<&'src Tensor<Pinned, T>>,
}

impl<D: Device, T: Element> Transfer<'_, D, T> {
    /// The device tensor, usable now on the copy's stream (and on others, which wait).
    pub fn tensor(&self) -> &Tensor<D, T> {
        self.tensor.as_ref().expect("a transfer holds its tensor until wait() takes it")
    }

    /// Whether the copy has completed.
    pub fn is_ready(&self) -> Result<bool> {
        backend::for_device(self.tensor().device())?.event_done(&self.done)
    }

    /// Waits for the copy, releases the source, and returns the device tensor.
    pub fn wait(mut self) -> Result<Tensor<D, T>> {
        let t = self.tensor.take().expect("a transfer holds its tensor until wait() takes it");
        backend::for_device(t.device())?.sync_event(&self.done)?;
        Ok(t)
    }
}

impl<D: Device, T: Element> Drop for Transfer<'_, D, T> {
    fn drop(&mut self) {
        // The borrow of the source ends here, so the copy must be over.
        if let Some(t) = &self.tensor {
            if let Ok(b) = backend::for_device(t.device()) {
                let _ = b.sync_event(&self.done);
            }
        }
    }
}

/// A value that an asynchronous copy is still writing: it can be waited for or polled,
/// but not read until [`Pending::wait`] returns it. Reading it earlier
/// (`pending.to_vec()`, `&pending + &x`) does not compile, and the message says to call
/// `.wait()` (see [`Waited`](crate::Waited)).
#[must_use = "the data arrives only through .wait()"]
pub struct Pending<V> {
    value: V,
    device: DeviceId,
    done: AnyEvent,
}

impl<V> Pending<V> {
    /// Whether the copy has completed.
    pub fn is_ready(&self) -> Result<bool> {
        backend::for_device(self.device)?.event_done(&self.done)
    }

    /// Waits for the copy and returns the value.
    pub fn wait(self) -> Result<V> {
        backend::for_device(self.device)?.sync_event(&self.done)?;
        Ok(self.value)
    }
}

impl<T: Element> Tensor<Cpu, T> {
    /// A copy in page-locked memory from the pinned pool (PyTorch's `pin_memory()`).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let p = Tensor::<Cpu>::from_vec(vec![1.0, 2.0], [2])?.pin_memory()?;
    /// assert_eq!(p.to_vec()?, vec![1.0, 2.0]);
    /// assert!(p.is_pinned());
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn pin_memory(&self) -> Result<Tensor<Pinned, T>> {
        self.to::<Pinned>()
    }
}

impl<D: Device, T: Element> Tensor<D, T> {
    /// Whether the data is page-locked host memory from the pinned pool.
    pub fn is_pinned(&self) -> bool {
        self.storage().buf.as_host().is_some_and(HostBuffer::is_pinned)
    }

    /// Starts copying this pinned tensor to the device of `stream`, on `stream`.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Cuda, Stream, Tensor};
    /// let s = Stream::<Cuda<0>>::new()?;
    /// let src = Tensor::<Cpu>::arange(0.0, 4.0, 1.0)?.pin_memory()?;
    /// let copy = src.to_async(&s)?;
    /// let doubled = locus::on_stream(&s, || copy.tensor() * 2.0)?; // same stream: no wait
    /// let x = copy.wait()?;                                                  // `src` free again
    /// assert_eq!(x.to_vec()?, vec![0.0, 1.0, 2.0, 3.0]);
    /// assert_eq!(doubled.to_vec()?, vec![0.0, 2.0, 4.0, 6.0]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn to_async<E: StaticDevice>(&self, stream: &Stream<E>) -> Result<Transfer<'_, E, T>>
    where
        D: AsyncSource,
    {
        let (tensor, done) = copy_pinned_async(self, E::resolve()?, &stream.raw)?;
        Ok(Transfer { tensor: Some(tensor), done, _source: PhantomData })
    }

    /// Starts copying this device tensor into new pinned memory, on `stream` (of the
    /// same device). The result can be read only after [`Pending::wait`].
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Stream, Tensor};
    /// let s = Stream::<Cuda<0>>::new()?;
    /// let x = Tensor::<Cuda<0>>::full([3], 7.0)?;
    /// let pending = x.to_pinned_async(&s)?;
    /// let host = pending.wait()?;
    /// assert_eq!(host.to_vec()?, vec![7.0; 3]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn to_pinned_async<E: Device>(&self, stream: &Stream<E>) -> Result<Pending<Tensor<Pinned, T>>>
    where
        D: SameStreamDevice<E>,
    {
        self.same_device_as("to_pinned_async", stream.device())?;
        if self.device().is_host() {
            return Err(Error::InvalidArgument {
                op: "to_pinned_async",
                reason: format!("the tensor is on {}, not a CUDA device; use .to::<Pinned>()", self.device()),
            });
        }
        let mut dst = host::host().alloc_for_overwrite(DeviceId::Pinned, self.storage().bytes())?;
        let done = self.storage().buf.download_async(&mut dst, &stream.raw)?;
        let value = Tensor::from_buffer(Pinned, Buffer::host(dst), self.checked_shape().clone());
        Ok(Pending { value, device: self.device(), done })
    }
}

/// Queues a copy of host tensor `src` (pinned memory) to `dst` on `stream`. The pinned
/// block is held from reuse until the returned event, so `src` may be dropped at once;
/// only [`Transfer`]'s borrow keeps the user from writing to it meanwhile.
pub(crate) fn copy_pinned_async<D: Device, E: Device, T: Element>(
    src: &Tensor<D, T>,
    dst: E,
    stream: &AnyStream,
) -> Result<(Tensor<E, T>, AnyEvent)> {
    let Some(host) = src.storage().buf.as_host() else {
        return Err(Error::InvalidArgument { op: "to_async", reason: "the source is not host memory".into() });
    };
    if dst.id().ordinal().is_none() {
        return Err(Error::InvalidArgument {
            op: "to_async",
            reason: format!("copies go to a CUDA device, not {}", dst.id()),
        });
    }
    let (buf, done) = backend::for_device(dst.id())?.upload_async(dst.id(), host, stream)?;
    Ok((Tensor::from_buffer(dst, buf, src.checked_shape().clone()), done))
}

/// Host placements, whose data the host can read and write in place.
pub trait HostPlacement: StaticDevice {}
impl HostPlacement for Cpu {}
impl HostPlacement for Pinned {}

impl<D: HostPlacement, T: Element> Tensor<D, T> {
    /// The elements, read in place.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let t = Tensor::<Cpu, i32>::arange(0, 3, 1)?;
    /// assert_eq!(t.as_slice(), &[0, 1, 2]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn as_slice(&self) -> &[T] {
        // A host placement's memory comes from the host backend (`backend::for_device`
        // sends `cpu` and `pinned` nowhere else), so it is host memory; no other memory
        // can be read in place, and an empty slice is all it could give.
        self.storage().buf.as_host().map_or(&[], HostBuffer::as_slice)
    }

    /// The elements, written in place. A tensor that shares its memory with clones is
    /// copied first (copy on write), so the clones keep their values. Pinned memory that
    /// an asynchronous copy may still read is handed out only once that copy completes
    /// (a host wait), whatever happened to the copy's [`Transfer`].
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cpu, Tensor};
    /// let mut t = Tensor::<Cpu>::zeros([3])?;
    /// let before = t.clone();
    /// t.as_mut_slice()?[1] = 5.0;
    /// assert_eq!(t.to_vec()?, vec![0.0, 5.0, 0.0]);
    /// assert_eq!(before.to_vec()?, vec![0.0; 3]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn as_mut_slice(&mut self) -> Result<&mut [T]> {
        if Arc::get_mut(self.storage_mut("as_mut_slice")).is_none() {
            let copy = self.storage().copy_to(self.device())?;
            *self.storage_mut("as_mut_slice") = Arc::new(copy);
        }
        match Arc::get_mut(self.storage_mut("as_mut_slice")).map(Storage::buf_mut) {
            // Pinned memory that a copy still reads (a plain `.to()`, or a `Transfer`
            // that was forgotten or failed to wait) is written only after that copy.
            Some(Buffer::Host(h)) => h.writable(),
            _ => Err(Error::InvalidArgument {
                op: "as_mut_slice",
                reason: "the tensor's memory is not host memory".into(),
            }),
        }
    }
}
