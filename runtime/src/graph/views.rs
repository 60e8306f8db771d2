//! The two ways to a graph's memory from outside: [`Output`], a read-only view of an
//! output after a replay, and [`InputMut`], the way new data goes into an input.
//!
//! Neither hands out a `Tensor` that shares the graph's memory (a clone of one would see
//! the next replay's writes): reads copy out, and writes copy in, in place.

use std::sync::Arc;

use crate::backend::dispatch::current::with_current;
use crate::backend::sync::capture::IndexRule;
use crate::backend::sync::checked;
use crate::backend::{self, AnyStream};
use crate::device::{Device, DeviceId, StaticDevice};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::placement::SamePlacement;
use crate::storage::Storage;
use crate::tensor::Tensor;

/// An output of a graph as the last replay wrote it, borrowed from the graph: while it
/// lives the graph cannot replay (that would write it). Reads wait for the replay on the
/// device (an event), or on the host for `to_vec` and `item`.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Cuda, Graph, Stream, Tensor};
/// let s = Stream::<Cuda<0>>::new()?;
/// let mut x = Tensor::<Cuda<0>>::from_vec(vec![1.0, 2.0], [2])?;
/// let mut g = Graph::capture(&s, &mut x, |x| x * 10.0)?;
/// let y = g.replay()?;
/// assert_eq!(y.to_vec()?, vec![10.0, 20.0]);
/// let kept: Tensor<Cuda<0>> = y.to_tensor()?; // a copy: the next replay does not change it
/// g.inputs_mut().copy_from_slice(&[3.0, 4.0])?;
/// assert_eq!(g.replay()?.to_vec()?, vec![30.0, 40.0]);
/// assert_eq!(kept.to_vec()?, vec![10.0, 20.0]);
/// # Ok::<(), locus::Error>(())
/// ```
#[derive(Debug)]
pub struct Output<'g, D: Device, T: Element = f32> {
    t: &'g Tensor<D, T>,
}

impl<'g, D: Device, T: Element> Output<'g, D, T> {
    pub(crate) fn new(t: &'g Tensor<D, T>) -> Self {
        Output { t }
    }

    /// The dims, outermost first.
    pub fn shape(&self) -> &[usize] {
        self.t.shape()
    }

    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.t.numel()
    }

    /// Where the output lives.
    pub fn device(&self) -> DeviceId {
        self.t.device()
    }

    /// The elements, copied to the host (waits for the replay).
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.t.to_vec()
    }

    /// The one element of a one-element output (waits for the replay).
    pub fn item(&self) -> Result<T> {
        self.t.item()
    }

    /// A copy as a tensor of its own on the same placement, queued on the current stream.
    pub fn to_tensor(&self) -> Result<Tensor<D, T>> {
        let storage = self.t.storage().copy_to(self.t.device())?;
        Ok(self.t.over_storage(self.t.placement(), Arc::new(storage)))
    }

    /// A copy on placement `E` (a copy even when `E` is the output's own placement).
    pub fn to<E: StaticDevice>(&self) -> Result<Tensor<E, T>> {
        let to = E::resolve()?;
        let storage = self.t.storage().copy_to(to.id())?;
        Ok(self.t.over_storage(to, Arc::new(storage)))
    }
}

/// Where the writes into a graph's inputs queue: on the stream of the graph's last
/// replay, which reads them, so that a write waits there behind that replay and nothing
/// else does (not the current stream, where a later check of a source or an upload would
/// then wait for the replay too); on the current stream before the first replay.
#[doc(hidden)]
#[derive(Clone, Debug, Default)]
pub struct WritesOn(pub(crate) Option<AnyStream>);

/// An input of a graph, lent for writing between replays. New data is copied over the
/// input's memory in place (the graph reads it from there), ordered after the replays
/// that read the old data and before the next one. The copy queues on the stream of the
/// last replay (before the first, on the current stream): the calling thread and its
/// current stream never wait for a replay to write an input.
#[derive(Debug)]
pub struct InputMut<'g, D: Device, T: Element = f32> {
    t: &'g mut Tensor<D, T>,
    on: WritesOn,
}

impl<'g, D: Device, T: Element> InputMut<'g, D, T> {
    pub(crate) fn new(t: &'g mut Tensor<D, T>, on: &WritesOn) -> Self {
        InputMut { t, on: on.clone() }
    }

    /// The dims, outermost first.
    pub fn shape(&self) -> &[usize] {
        self.t.shape()
    }

    /// The elements now, copied to the host.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.t.to_vec()
    }

    /// The input's memory, to be written in place: its contents get a new id.
    fn target(&mut self) -> Result<&crate::backend::Buffer> {
        match Arc::get_mut(self.t.storage_mut("InputMut write")) {
            Some(s) => Ok(Storage::buf_mut(s)),
            None => Err(Error::InvalidArgument {
                op: "copy_from",
                reason: "the input shares its memory with another tensor".into(),
            }),
        }
    }

    /// Copies `src`, a tensor of the same shape on the input's placement, into the input.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Graph, Stream, Tensor};
    /// let s = Stream::<Cuda<0>>::new()?;
    /// let mut x = Tensor::<Cuda<0>>::zeros([3])?;
    /// let mut g = Graph::capture(&s, &mut x, |x| x + 1.0)?;
    /// g.inputs_mut().copy_from(&Tensor::<Cuda<0>>::full([3], 5.0)?)?;
    /// assert_eq!(g.replay()?.to_vec()?, vec![6.0; 3]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn copy_from<E>(&mut self, src: &Tensor<E, T>) -> Result<()>
    where
        E: Device,
        D: SamePlacement<E>,
    {
        if src.shape() != self.t.shape() {
            return Err(Error::ShapeMismatch {
                op: "copy_from",
                lhs: self.t.shape().to_vec(),
                rhs: src.shape().to_vec(),
            });
        }
        if src.device() != self.t.device() {
            return Err(Error::DeviceMismatch { op: "copy_from", lhs: self.t.device(), rhs: src.device() });
        }
        backend::for_device(self.t.device())?;
        let src = src.buffer();
        // The indices a graph reads from this input, checked in the source now: the source
        // waits for its own writes only, not for the replays that read the input.
        let rules = self.rules();
        let verdict = match rules.is_empty() {
            true => None,
            false => {
                let limits: Vec<(usize, usize)> = rules.iter().map(|r| (r.count, r.bound())).collect();
                let bad = src.check_indices(&limits)?;
                Some(bad.map_or(Ok(()), |(i, at, v)| Err(rules[i].error(at, v.into()))))
            }
        };
        self.write(verdict, |target| target.overwrite(src))
    }

    /// The index rules of the graphs that read this input (none for most inputs; only an
    /// `i32` input holds indices a captured op reads).
    ///
    /// A capture's rules go with it; a capture never dropped (`mem::forget`) leaves its
    /// rules behind, which a later input at the same address must not take for its own: a
    /// rule for more indices than this input holds is not this input's, and then none are.
    fn rules(&self) -> Vec<IndexRule> {
        if T::DTYPE != crate::element::DType::I32 {
            return Vec::new();
        }
        let rules = checked::rules_at(self.t.device(), self.t.buffer().addr());
        match rules.iter().any(|r| r.count > self.t.numel()) {
            true => Vec::new(),
            false => rules,
        }
    }

    /// Writes the input with `write` (on the stream of the last replay, [`WritesOn`]), and
    /// keeps `verdict` (the check of the indices written, if the input has rules) for the
    /// next replay, which then need not check them itself.
    fn write(&mut self, verdict: Option<Result<()>>, write: impl FnOnce(&backend::Buffer) -> Result<()>) -> Result<()> {
        let (device, addr) = (self.t.device(), self.t.buffer().addr());
        checked::set_verdict(device, addr, None);
        let on = self.on.0.clone();
        let target = self.target()?;
        match on {
            Some(stream) => with_current(device, stream, || write(target))?,
            None => write(target)?,
        }
        checked::set_verdict(device, addr, verdict);
        Ok(())
    }

    /// Copies an output of the graph (of the same shape and placement) into this input:
    /// a training step's new weights into the weights the next replay reads. See
    /// [`Graph::io`](super::Graph::io).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// use locus::{Cuda, Graph, Stream, Tensor};
    /// let s = Stream::<Cuda<0>>::new()?;
    /// let mut w = Tensor::<Cuda<0>>::ones([2])?;
    /// let mut g = Graph::capture(&s, &mut w, |w| w * 2.0)?; // one step: w <- 2w
    /// g.replay()?;
    /// for _ in 0..3 {
    ///     let (next, mut w) = g.io()?;
    ///     w.copy_from_output(&next)?;
    ///     g.replay()?;
    /// }
    /// assert_eq!(g.outputs()?.to_vec()?, vec![16.0; 2]);
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn copy_from_output<E>(&mut self, src: &Output<'_, E, T>) -> Result<()>
    where
        E: Device,
        D: SamePlacement<E>,
    {
        self.copy_from(src.t)
    }

    /// Copies `data`, one element per element of the input, into the input.
    pub fn copy_from_slice(&mut self, data: &[T]) -> Result<()> {
        if data.len() != self.t.numel() {
            return Err(Error::InvalidArgument {
                op: "copy_from_slice",
                reason: format!("{} elements for an input of {} ({:?})", data.len(), self.t.numel(), self.t.shape()),
            });
        }
        let device = self.t.device();
        let bytes: &[u8] = bytemuck::cast_slice(data);
        // The indices a graph reads from this input, checked here on the host.
        let rules = self.rules();
        let verdict = (!rules.is_empty()).then(|| rules.iter().try_for_each(|r| r.check(bytes)));
        let staged = backend::for_device(device)?.upload(device, bytes)?;
        self.write(verdict, |target| target.overwrite(&staged))
    }
}
