//! CUDA graphs whose rules are types and borrows: [`Graph::capture`] records the ops a
//! closure queues on a stream, once; [`Graph::replay`] runs them all again with one
//! launch, at a fraction of the cost of launching each op.
//!
//! What PyTorch's `torch.cuda.graph` leaves to the user, locus checks:
//! - The inputs are borrowed mutably by the graph for as long as it lives: they cannot be
//!   dropped, moved, replaced or written directly, only through [`Graph::inputs_mut`],
//!   which copies new data into the same memory, ordered after the replays that read
//!   the old data.
//! - The outputs belong to the graph and are read through [`Output`] views, which
//!   borrow it: a replay while one is alive does not compile.
//! - Memory made during the capture belongs to the graph (a private pool, never blocks
//!   another stream may still use) and is freed with it; a tensor made in the capture
//!   that is still held anywhere but in the returned outputs is an error at capture.
//! - What cannot be captured is an [`Error::NotCapturable`] naming the op: host reads
//!   and synchronizes, copies to or from host memory, ops on another device, reading a
//!   tensor that is not an input, collectives, a `Loader`.
//! - Work forked to other streams of the device inside the capture (a stream that waits
//!   for an event recorded on a captured stream joins the capture) is part of the graph,
//!   with the same order, and must be joined back before the closure returns.
//! - Indices that `index_select` and `cross_entropy` read in the capture come from the
//!   inputs, and each replay checks them first: one out of range is the op's own error
//!   and the graph does not run (indices computed in the capture are refused).
//! - A replay is ordered like any op: after the writes of its inputs, before later
//!   reads of its outputs, after earlier reads of them (on any stream).
//!
//! On the host backend the captured ops are recorded and replayed by the simulated
//! stream, with the same rules and errors.

mod lists;
mod views;

use crate::backend::few::with_refs;
use crate::backend::{self, dispatch::capture, dispatch::current::with_current, AnyGraph, AnyStream, Buffer};
use crate::device::Device;
use crate::error::{Error, Result};
use crate::placement::SameGraphDevice;
use crate::storage::Storage;
use crate::stream::Stream;

use std::sync::Arc;

pub(crate) use lists::Parts;
pub use lists::{GraphInputs, GraphOutputs};
pub(crate) use views::WritesOn;
pub use views::{InputMut, Output};

/// How many graph replays checked their index inputs on the device before running (a
/// captured `index_select`'s indices, a `cross_entropy`'s targets), which waits for the
/// inputs' writes and so for the replays before them. A replay whose index inputs were
/// last written through [`InputMut::copy_from`] (the indices checked in the source) or
/// [`InputMut::copy_from_slice`] (checked on the host) takes those checks' verdicts
/// instead, and queues behind the last replay without waiting.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{replay_index_checks, Cuda, Graph, Stream, Tensor};
/// let s = Stream::<Cuda<0>>::new()?;
/// let (mut table, mut ids) = (Tensor::<Cuda<0>>::ones([4, 2])?, Tensor::<Cuda<0>, i32>::zeros([3])?);
/// let mut g = Graph::capture(&s, (&mut table, &mut ids), |(t, i)| t.index_select(0, i))?;
/// let before = replay_index_checks();
/// g.replay()?; // the ids as captured: checked before this replay
/// g.inputs_mut().1.copy_from(&Tensor::<Cuda<0>, i32>::from_vec(vec![3, 1, 0], [3])?)?; // checked here
/// g.replay()?;
/// assert_eq!(replay_index_checks() - before, 1);
/// g.inputs_mut().1.copy_from_slice(&[0, 4, 1])?; // 4 is out of range: kept for the replay
/// assert!(g.replay().is_err());
/// # Ok::<(), locus::Error>(())
/// ```
pub fn replay_index_checks() -> u64 {
    crate::backend::sync::checked::replay_checks()
}

/// Work on device `D` captured once, replayed many times: the inputs `I` it borrows
/// (see [`GraphInputs`]) and the outputs `O` it owns (see [`GraphOutputs`]).
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{Cuda, Graph, Stream, Tensor};
/// let stream = Stream::<Cuda<0>>::new()?;
/// let mut x = Tensor::<Cuda<0>>::from_vec(vec![1.0, 2.0, 3.0], [3])?;
/// let mut b = Tensor::<Cuda<0>>::ones([3])?;
/// // Capture: the closure runs once; its ops are recorded, not run.
/// let mut g = Graph::capture(&stream, (&mut x, &mut b), |(x, b)| {
///     let mut y = (x + b)?;
///     for _ in 0..9 {
///         y = (&y + b)?;
///     }
///     Ok(y)
/// })?;
/// assert_eq!(g.replay()?.to_vec()?, vec![11.0, 12.0, 13.0]);
/// // New data goes in through the graph; `x` itself stays borrowed while `g` lives.
/// g.inputs_mut().0.copy_from_slice(&[0.0, 0.0, 0.0])?;
/// assert_eq!(g.replay()?.to_vec()?, vec![10.0; 3]);
/// drop(g);
/// assert_eq!(x.to_vec()?, vec![0.0; 3]);
/// # Ok::<(), locus::Error>(())
/// ```
pub struct Graph<D: Device, I, O> {
    inputs: I,
    outputs: O,
    raw: AnyGraph,
    stream: Stream<D>,
    /// The stream of the last replay.
    last: Option<AnyStream>,
    /// The outputs' storages made in the capture: each replay writes them.
    written: Vec<std::sync::Arc<crate::storage::Storage>>,
}

impl<D: Device, I, O> std::fmt::Debug for Graph<D, I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Graph on {} ({} outputs written per replay)", self.stream.device(), self.written.len())
    }
}

/// Ends a capture however the closure leaves (an error or a panic), so the stream is
/// never left capturing.
pub(crate) struct Ending<'s> {
    backend: backend::AnyBackend,
    stream: &'s AnyStream,
    device: crate::device::DeviceId,
    ended: bool,
}

impl Ending<'_> {
    pub(crate) fn end(mut self) -> Result<AnyGraph> {
        self.ended = true;
        self.backend.end_capture(self.stream)
    }
}

impl Drop for Ending<'_> {
    fn drop(&mut self) {
        if !self.ended {
            let _ = self.backend.end_capture(self.stream);
        }
    }
}

impl Ending<'_> {
    /// Runs `f`, whose ops the capture records, with the capture's stream current.
    pub(crate) fn run<R>(&self, f: impl FnOnce() -> R) -> R {
        let device = self.device;
        let _capturing = capture::enter(device);
        with_current(device, self.stream.clone(), f)
    }
}

/// Starts capturing the work queued on `stream`: captured ops may read `inputs` and
/// `state`, and write `state` in place (a training step's parameters and optimizer
/// state). Every tensor is on `stream`'s device; `state` is ordered here for the writes
/// (after every earlier use), `inputs` for reads.
pub(crate) fn begin<'s, D: Device>(
    stream: &'s Stream<D>,
    inputs: &[&Arc<Storage>],
    state: &[&Arc<Storage>],
) -> Result<Ending<'s>> {
    let device = stream.device();
    if !matches!(device, crate::device::DeviceId::Cuda(_)) {
        return Err(Error::InvalidArgument {
            op: "Graph::capture",
            reason: format!("graphs capture the work of a CUDA device, not of {device}"),
        });
    }
    capture::refuse("Graph::capture", "a capture cannot start inside another")?;
    let backend = backend::for_device(device)?;
    for s in inputs.iter().chain(state) {
        if s.device != device {
            return Err(Error::DeviceMismatch { op: "Graph::capture", lhs: device, rhs: s.device });
        }
    }
    for s in state {
        s.buf.before_write(&stream.raw)?;
    }
    let bufs: Vec<&Buffer> = inputs.iter().chain(state).map(|s| &s.buf).collect();
    backend.begin_capture(&stream.raw, &bufs)?;
    Ok(Ending { backend, stream: &stream.raw, device, ended: false })
}

/// After a capture: nothing made in it, and no input's memory, is held anywhere but in
/// the outputs (the references are counted); the outputs' storages made in it, which
/// every replay writes, are returned. `inputs` includes what the capture wrote in place,
/// whose captured writes (which never ran) are forgotten with the outputs'.
pub(crate) fn seal(raw: &AnyGraph, inputs: &[&Arc<Storage>], outputs: &[&Arc<Storage>]) -> Result<Vec<Arc<Storage>>> {
    let uses = |s: &Arc<Storage>| outputs.iter().filter(|o| Arc::ptr_eq(o, s)).count();
    if inputs.iter().any(|s| Arc::strong_count(s) != 1) {
        return Err(escaped());
    }
    let mut written: Vec<Arc<Storage>> = Vec::new();
    for s in outputs {
        if raw.owns(&s.buf) && !written.iter().any(|w| Arc::ptr_eq(w, *s)) {
            if Arc::strong_count(s) != uses(s) {
                return Err(escaped());
            }
            written.push(Arc::clone(s));
        }
    }
    if raw.live_buffers() != written.len() {
        return Err(escaped());
    }
    for s in written.iter().chain(inputs.iter().copied()) {
        s.buf.forget_captured_writes();
    }
    Ok(written)
}

/// Queues one replay of `raw` on `stream`, reading `reads` and writing `writes`: after the
/// previous replay (`last`, whatever its stream) and the reads' writers, before later
/// uses of the writes.
pub(crate) fn launch(
    raw: &AnyGraph,
    device: crate::device::DeviceId,
    last: &mut Option<AnyStream>,
    stream: &AnyStream,
    reads: &[&Buffer],
    writes: &[&Buffer],
) -> Result<()> {
    let backend = backend::for_device(device)?;
    if let Some(last) = last.as_ref().filter(|l| !l.same(stream)) {
        // The graph's own memory is written by every replay: one after the other.
        let ev = backend.new_event(device, false)?;
        backend.record_event(&ev, last)?;
        backend.wait_event(stream, &ev)?;
    }
    for b in reads {
        b.use_on_stream(stream)?;
    }
    for b in writes {
        b.before_write(stream)?;
    }
    backend.launch_graph(raw, stream, reads, writes)?;
    for b in writes {
        b.after_replay(stream)?;
    }
    *last = Some(stream.clone());
    Ok(())
}

pub(crate) fn not_replayed() -> Error {
    Error::InvalidArgument {
        op: "Graph::outputs",
        reason: "the graph has not been replayed yet: its outputs hold nothing; call `replay()` first".into(),
    }
}

fn escaped() -> Error {
    Error::InvalidArgument {
        op: "Graph::capture",
        reason: "a tensor made in the capture (or a clone or view of an input) is held outside the graph's outputs; \
                 a replay would change it under its owner: return every tensor the graph writes from the closure \
                 and read it through the graph after `replay()`"
            .into(),
    }
}

impl<D, I, O> Graph<D, I, O>
where
    D: Device,
    I: for<'c> GraphInputs<'c, D>,
    O: GraphOutputs,
{
    /// Captures the ops `f` queues on `stream`'s device into a graph. `f` gets the
    /// `inputs` as `&Tensor`s (in the same shape: a tuple for a tuple) and returns the
    /// outputs. Nothing runs until [`Graph::replay`]; the outputs hold the results of the
    /// last replay.
    ///
    /// An input that shares its memory with another tensor is given a copy of its own
    /// first, as [`Tensor::as_mut_slice`](crate::Tensor::as_mut_slice) does.
    pub fn capture<F>(stream: &Stream<D>, mut inputs: I, f: F) -> Result<Self>
    where
        F: for<'c> FnOnce(<I as GraphInputs<'c, D>>::Refs) -> Result<O>,
    {
        inputs.own_memory()?;
        let ending = {
            let mut parts = Parts { tensors: Vec::new() };
            inputs.parts(&mut parts);
            begin(stream, &parts.tensors, &[])?
        };
        let outputs = ending.run(|| f(inputs.refs()));
        let raw = ending.end();
        let (outputs, raw) = (outputs?, raw?);
        let written = {
            let mut ins = Parts { tensors: Vec::new() };
            inputs.parts(&mut ins);
            let mut outs = Parts { tensors: Vec::new() };
            outputs.parts(&mut outs);
            seal(&raw, &ins.tensors, &outs.tensors)?
        };
        Ok(Graph { inputs, outputs, raw, stream: stream.clone(), last: None, written })
    }

    /// Queues one replay on the capture's stream and returns the outputs, as that replay
    /// writes them. While they are borrowed the graph cannot replay again.
    pub fn replay(&mut self) -> Result<O::View<'_>> {
        let stream = self.stream.raw.clone();
        self.launch(&stream)?;
        Ok(self.outputs.view())
    }

    /// Queues one replay on `stream`, a stream of the graph's device: ordered after the
    /// previous replay (whatever its stream) and the inputs' writers, before later uses
    /// of the outputs.
    pub fn replay_on<E>(&mut self, stream: &Stream<E>) -> Result<O::View<'_>>
    where
        E: Device + SameGraphDevice<D>,
    {
        if stream.device() != self.stream.device() {
            return Err(Error::DeviceMismatch {
                op: "Graph::replay_on",
                lhs: self.stream.device(),
                rhs: stream.device(),
            });
        }
        self.launch(&stream.raw)?;
        Ok(self.outputs.view())
    }

    fn launch(&mut self, stream: &AnyStream) -> Result<()> {
        let mut ins = Parts::reused();
        self.inputs.parts(&mut ins);
        let (raw, device, last) = (&self.raw, self.stream.device(), &mut self.last);
        let reads = ins.tensors.iter().map(|s| Ok(&s.buf));
        let writes = self.written.iter().map(|s| Ok(&s.buf));
        let r = with_refs(reads, |reads| with_refs(writes, |writes| launch(raw, device, last, stream, reads, writes)));
        ins.recycle();
        r
    }

    /// The outputs as the last replay wrote them; an error before the first replay.
    pub fn outputs(&self) -> Result<O::View<'_>> {
        match self.last {
            Some(_) => Ok(self.outputs.view()),
            None => Err(not_replayed()),
        }
    }

    /// The outputs of the last replay and the inputs for writing, at once: to feed an
    /// output back into an input (a training step's new weights) with
    /// [`InputMut::copy_from_output`], one device copy. An error before the first replay.
    pub fn io(&mut self) -> Result<(O::View<'_>, <I as GraphInputs<'_, D>>::Writers)> {
        if self.last.is_none() {
            return Err(not_replayed());
        }
        let on = WritesOn(self.last.clone());
        Ok((self.outputs.view(), self.inputs.writers(&on)))
    }

    /// The inputs, for writing new data into them between replays (in the same shape
    /// as the list: a tuple of [`InputMut`]s for a tuple).
    pub fn inputs_mut(&mut self) -> <I as GraphInputs<'_, D>>::Writers {
        self.inputs.writers(&WritesOn(self.last.clone()))
    }

    /// The stream the graph was captured on, where [`Graph::replay`] queues.
    pub fn stream(&self) -> &Stream<D> {
        &self.stream
    }
}
