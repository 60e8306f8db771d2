//! Streams and events, typed to their device.
//!
//! Each device has a default stream; [`on_stream`] makes another one current for its
//! device on the calling thread. A tensor remembers the stream that wrote it: using it on
//! another stream first makes that stream wait for the writer (an event, not a host
//! wait), and its memory is freed only after every stream that used it. A program that
//! uses one stream records no events at all.

use crate::backend::dispatch::current::{current, with_current};
use std::cell::RefCell;
use std::time::Duration;

use crate::backend::{self, AnyEvent, AnyStream};
use crate::device::{Device, DeviceId, StaticDevice};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::placement::{SameEventDevice, SameStreamDevice};
use crate::tensor::Tensor;

/// A stream of work on device `D`.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{on_stream, Cuda, Stream, Tensor};
/// let s = Stream::<Cuda<0>>::new()?;
/// let y = on_stream(&s, || (Tensor::<Cuda<0>>::ones([4])? * 2.0))?;
/// s.synchronize()?;
/// assert_eq!(y.to_vec()?, vec![2.0; 4]);
/// # Ok::<(), locus::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Stream<D: Device> {
    pub(crate) raw: AnyStream,
    device: D,
}

impl<D: Device> Stream<D> {
    /// A new stream on `device`.
    pub fn new_on(device: D) -> Result<Self> {
        let raw = backend::for_device(device.id())?.new_stream(device.id())?;
        Ok(Stream { raw, device })
    }

    /// The default stream of `device`: the one ops use when no other is current.
    pub fn default_on(device: D) -> Result<Self> {
        let raw = backend::for_device(device.id())?.default_stream(device.id())?;
        Ok(Stream { raw, device })
    }

    /// The device this stream runs on.
    pub fn device(&self) -> DeviceId {
        self.device.id()
    }

    /// The placement value of the device this stream runs on.
    pub(crate) fn placement(&self) -> D {
        self.device
    }

    /// Waits on the host until everything queued on this stream has run.
    pub fn synchronize(&self) -> Result<()> {
        backend::for_device(self.device())?.sync_stream(&self.raw)
    }

    /// A new event recorded at the current end of this stream.
    pub fn record_event(&self) -> Result<Event<D>> {
        let e = Event::new_on(self.device)?;
        e.record(self)?;
        Ok(e)
    }

    /// Makes this stream wait (on the device, not the host) until `event` has happened.
    /// The event must be of this stream's device: a type error for static placements,
    /// `Error::InvalidArgument` for a [`Dyn`](crate::Dyn) one on another device.
    pub fn wait_event<E>(&self, event: &Event<E>) -> Result<()>
    where
        E: Device + SameEventDevice<D>,
    {
        event.check_stream("wait_event", self)?;
        backend::for_device(self.device())?.wait_event(&self.raw, &event.raw)
    }

    /// Whether both handles name the same stream.
    pub fn same_as(&self, other: &Stream<D>) -> bool {
        self.raw.same(&other.raw)
    }
}

impl<D: StaticDevice> Stream<D> {
    /// A new stream on `D`.
    pub fn new() -> Result<Self> {
        Self::new_on(D::resolve()?)
    }

    /// The default stream of `D`.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Stream};
    /// let a = Stream::<Cuda<0>>::default_stream()?;
    /// assert!(a.same_as(&Stream::<Cuda<0>>::default_stream()?));
    /// assert!(!a.same_as(&Stream::<Cuda<0>>::new()?));
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn default_stream() -> Result<Self> {
        Self::default_on(D::resolve()?)
    }
}

/// Runs `f` with `stream` current for its device on this thread, then restores the
/// previous one (also when `f` panics). Ops on that device inside `f` queue on `stream`.
/// An op inside `f` on another device, whose own stream nothing made current, would run
/// on that device's default stream: it is `Err(Error::StreamOfOtherDevice)` instead,
/// naming both devices (nest an `on_stream` of that device to run it on a stream of its
/// own). Copies and host placements are not checked.
pub fn on_stream<D: Device, R>(stream: &Stream<D>, f: impl FnOnce() -> R) -> R {
    let _entered = Entered::push(stream.device());
    with_current(stream.device(), stream.raw.clone(), f)
}

thread_local! {
    /// The devices of the streams `on_stream` made current on this thread, innermost last.
    static ENTERED: RefCell<Vec<DeviceId>> = const { RefCell::new(Vec::new()) };
}

/// One `on_stream` scope on this thread's [`ENTERED`], popped on drop (also on a panic).
struct Entered;

impl Entered {
    fn push(device: DeviceId) -> Entered {
        ENTERED.with(|e| e.borrow_mut().push(device));
        Entered
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        ENTERED.with(|e| e.borrow_mut().pop());
    }
}

/// Checks that `op`, about to be queued on `device`, runs where the caller meant: inside
/// `on_stream` of another device's stream, with no stream of `device` current, it would
/// silently run on `device`'s default stream, so it is an `Err` naming both devices. Host
/// placements have no streams, and outside `on_stream` there is nothing to check.
pub(crate) fn check_op_stream(op: &'static str, device: DeviceId) -> Result<()> {
    if !matches!(device, DeviceId::Cuda(_)) {
        return Ok(());
    }
    let Some(stream) = ENTERED.with(|e| e.borrow().last().copied()) else {
        return Ok(());
    };
    if stream == device || current(device).is_some() {
        return Ok(());
    }
    Err(Error::StreamOfOtherDevice { op, device, stream })
}

/// The stream ops on `D` use on this thread now.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{current_stream, on_stream, Cuda, Stream};
/// let s = Stream::<Cuda<0>>::new()?;
/// assert!(current_stream(Cuda::<0>)?.same_as(&Stream::default_stream()?));
/// on_stream(&s, || assert!(current_stream(Cuda::<0>).unwrap().same_as(&s)));
/// # Ok::<(), locus::Error>(())
/// ```
pub fn current_stream<D: Device>(device: D) -> Result<Stream<D>> {
    match current(device.id()) {
        Some(raw) => Ok(Stream { raw, device }),
        None => Stream::default_on(device),
    }
}

/// Waits on the host until all work on `device` has run (`torch.cuda.synchronize`).
pub fn synchronize(device: DeviceId) -> Result<()> {
    backend::for_device(device)?.sync_device(device)
}

/// A point in a stream's work on device `D`, for ordering streams and timing.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Cuda, Event, Stream, Tensor};
/// let s = Stream::<Cuda<0>>::default_stream()?;
/// let start = s.record_event()?;
/// let x = Tensor::<Cuda<0>>::rand([1 << 12], 1)?.sum()?;
/// let end = s.record_event()?;
/// end.synchronize()?;
/// assert!(start.elapsed(&end)?.as_secs_f64() >= 0.0);
/// assert!(end.is_complete()?);
/// # drop(x);
/// # Ok::<(), locus::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Event<D: Device> {
    raw: AnyEvent,
    device: D,
}

impl<D: Device> Event<D> {
    /// A new, unrecorded event on `device` that can measure elapsed time.
    pub fn new_on(device: D) -> Result<Self> {
        let raw = backend::for_device(device.id())?.new_event(device.id(), true)?;
        Ok(Event { raw, device })
    }

    /// Records this event at the current end of `stream`, a stream of the event's device.
    pub fn record<S: Device>(&self, stream: &Stream<S>) -> Result<()>
    where
        D: SameEventDevice<S>,
    {
        self.check_stream("record", stream)?;
        backend::for_device(self.device.id())?.record_event(&self.raw, &stream.raw)
    }

    /// Makes `stream`, a stream of the event's device, wait for this event (on the device).
    pub fn wait<S: Device>(&self, stream: &Stream<S>) -> Result<()>
    where
        D: SameEventDevice<S>,
    {
        stream.wait_event(self)
    }

    /// The run-time half of `SameEventDevice`, for `Dyn` events and streams.
    fn check_stream<S: Device>(&self, op: &'static str, stream: &Stream<S>) -> Result<()> {
        let (event, stream) = (self.device.id(), stream.device());
        if event == stream {
            return Ok(());
        }
        Err(Error::InvalidArgument {
            op,
            reason: format!(
                "the event is of {event} but the stream of {stream}; an event orders the streams of its own device only"
            ),
        })
    }

    /// Waits on the host for the work before this event.
    pub fn synchronize(&self) -> Result<()> {
        backend::for_device(self.device.id())?.sync_event(&self.raw)
    }

    /// Whether the work before this event has run.
    pub fn is_complete(&self) -> Result<bool> {
        backend::for_device(self.device.id())?.event_done(&self.raw)
    }

    /// The time from this event to `end`; both must be recorded and complete.
    pub fn elapsed(&self, end: &Event<D>) -> Result<Duration> {
        let ms = backend::for_device(self.device.id())?.elapsed_ms(&self.raw, &end.raw)?;
        Ok(Duration::from_secs_f64(ms.max(0.0) as f64 / 1e3))
    }
}

impl<D: StaticDevice> Event<D> {
    /// A new, unrecorded event on `D`.
    pub fn new() -> Result<Self> {
        Self::new_on(D::resolve()?)
    }
}

impl<D: Device, T: Element> Tensor<D, T> {
    /// Marks this tensor as used on `stream` (PyTorch's `record_stream`): `stream` waits
    /// for the tensor's writer first, and the memory is freed only after `stream` is done
    /// with it. Ops do this by themselves for the current stream; call it for work that
    /// locus does not see.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Stream, Tensor};
    /// let t = Tensor::<Cuda<0>>::ones([8])?;
    /// t.record_stream(&Stream::<Cuda<0>>::new()?)?;
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn record_stream<E: Device>(&self, stream: &Stream<E>) -> Result<()>
    where
        D: SameStreamDevice<E>,
    {
        self.same_device_as("record_stream", stream.device())?;
        self.buffer().use_on_stream(&stream.raw)
    }
}

/// How many cross-stream waits locus has inserted in this process (a diagnostic: a
/// program that uses one stream per device keeps it at zero).
///
/// A tensor used on a stream other than the one that wrote it makes that stream wait for
/// the write once: later uses on the same stream insert nothing, nor does a first use
/// that an earlier wait already covers (the stream waited, through
/// [`Stream::wait_event`] or an automatic wait, for an event recorded on the writer at or
/// after the write). Those are counted by [`cross_stream_waits_skipped`].
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{cross_stream_waits, cross_stream_waits_skipped, on_stream, Cuda, Stream, Tensor};
/// let side = Stream::<Cuda<0>>::new()?;
/// let x = on_stream(&side, || Tensor::<Cuda<0>>::ones([4]))?; // written on `side`
/// let (waits, skipped) = (cross_stream_waits(), cross_stream_waits_skipped());
/// let mut y = (&x + 1.0)?; // the default stream waits for `side` once ...
/// for _ in 0..9 {
///     y = (&y + &x)?; // ... and not again
/// }
/// assert_eq!(y.to_vec()?, vec![11.0; 4]);
/// assert_eq!(cross_stream_waits() - waits, 1);
/// assert_eq!(cross_stream_waits_skipped() - skipped, 9);
/// # Ok::<(), locus::Error>(())
/// ```
pub fn cross_stream_waits() -> u64 {
    backend::cross_stream_waits()
}

/// How many cross-stream uses needed no wait of their own because an earlier wait
/// already ordered them (see [`cross_stream_waits`]).
pub fn cross_stream_waits_skipped() -> u64 {
    backend::cross_stream_waits_skipped()
}
