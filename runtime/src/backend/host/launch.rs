//! How the host backend runs an op, and the ops that make a buffer from nothing. On a
//! simulated device an op is a kernel queued on the current stream: its inputs are
//! prepared for that stream (cross-stream waits), its output is allocated at once and
//! written when the stream's worker reaches the job, as on a GPU. On the `cpu` and
//! `pinned` placements the kernel runs on the calling thread.

use std::sync::{Arc, Mutex};

use crate::backend::account::MemoryAccount;
use crate::backend::blocks;
use crate::backend::host::buffer::{HostBuffer, Span};
use crate::backend::host::kernels::{self, init};
use crate::backend::host::streams::{current_stream, use_on_stream, HostEvent, HostStream};
use crate::backend::sync::capture::Indexed;
use crate::backend::sync::hazard::Kind;
use crate::backend::{float_only, Dist};
use crate::element::{with_dtype, DType, Element, Scalar};
use crate::error::Result;

/// A kernel: the inputs' bytes, the output's bytes.
/// A kernel may run more than once: a graph's replays run its recorded jobs again.
pub(in crate::backend::host) type Kernel = Box<dyn FnMut(&[&[u8]], &mut [u8]) -> Result<()> + Send + 'static>;

pub(in crate::backend::host) fn typed<T: Element>(b: &[u8]) -> &[T] {
    bytemuck::cast_slice(b)
}

pub(in crate::backend::host) fn typed_mut<T: Element>(b: &mut [u8]) -> &mut [T] {
    bytemuck::cast_slice_mut(b)
}

/// How an op is launched: its name, the output's device (by its memory account), type
/// and length.
#[derive(Clone, Copy, Debug)]
pub(in crate::backend::host) struct Launch {
    pub op: &'static str,
    pub account: &'static MemoryAccount,
    pub dtype: DType,
    /// Elements of the output.
    pub len: usize,
    /// Wait for the kernel and return its error (as the cuda backend does for integer
    /// division, whose zero divisor the kernel finds).
    pub check: bool,
    /// The second input holds indices the kernel checks: how many, and what they pick. In
    /// a graph capture (where nothing runs to wait for) they must be an input of the
    /// graph, whose replays check them first.
    pub indices: Option<(usize, Indexed)>,
}

impl Launch {
    /// An op that cannot fail once launched.
    pub(in crate::backend::host) fn new(
        op: &'static str,
        account: &'static MemoryAccount,
        dtype: DType,
        len: usize,
    ) -> Self {
        Launch { op, account, dtype, len, check: false, indices: None }
    }
}

/// Runs `kernel` over `ins` into a new buffer (see the module doc).
pub(in crate::backend::host) fn launch(l: Launch, ins: &[&HostBuffer], mut kernel: Kernel) -> Result<HostBuffer> {
    let device = l.account.device;
    let bytes = l.len.checked_mul(l.dtype.size()).ok_or_else(|| blocks::out_of_memory(device, usize::MAX, 0))?;
    if device.is_host() {
        let mut out = HostBuffer::alloc(l.account, bytes, None)?;
        let views: Vec<&[u8]> = ins.iter().map(|h| h.bytes()).collect();
        kernel(&views, out.bytes_mut())?;
        return Ok(out);
    }
    let stream = current_stream(device);
    let capture = stream.capture();
    if let (Some(c), Some((count, of)), Some(index)) = (&capture, l.indices, ins.get(1)) {
        c.require(index, count, of)?;
    }
    for h in ins {
        use_on_stream(h, &stream)?;
    }
    let out = HostBuffer::alloc(l.account, bytes, Some(Arc::clone(&stream)))?;
    let spans: Vec<Span> = ins.iter().map(|h| h.span()).collect();
    let mut target = out.span();
    // Where a checked kernel leaves its result (only ops that wait for it need one).
    let result: Option<Arc<Mutex<Result<()>>>> = l.check.then(|| Arc::new(Mutex::new(Ok(()))));
    let slot = result.clone();
    let job = Box::new(move || {
        // The job runs on the stream that owns the output, after its inputs' writers
        // (the waits `use_on_stream` queued, or the same stream); the output is fresh,
        // and every later use is ordered after this job. The checker books these uses
        // below and reports any that is not so ordered.
        let views: Vec<&[u8]> = spans
            .iter()
            // SAFETY: each input was written before this job in stream order (above).
            .map(|s| unsafe { s.bytes() })
            .collect();
        // SAFETY: as above: nothing else uses the fresh output while the job runs.
        let r = kernel(&views, unsafe { target.bytes_mut() });
        match (&slot, r) {
            (Some(slot), r) => *slot.lock().unwrap_or_else(|p| p.into_inner()) = r,
            (None, Ok(())) => {}
            // A kernel that cannot fail did: a sticky error of the stream.
            (None, Err(e)) => panic!("{e}"),
        }
    });
    // The checker's bookkeeping and a trace's bytes, only when either is on (release builds
    // have no checker).
    let mut uses = Vec::new();
    if HostStream::uses_wanted() {
        uses.extend(ins.iter().map(|h| (h.region(Some(l.dtype)), Kind::Read)));
        uses.push((out.region(Some(l.dtype)), Kind::Write));
    }
    let (seq, clock) = stream.launch(l.op, &uses, job)?;
    out.mark_written();
    drop(uses);
    if let Some(result) = result.filter(|_| capture.is_none()) {
        stream.wait_job(seq, &clock)?;
        std::mem::replace(&mut *result.lock().unwrap_or_else(|p| p.into_inner()), Ok(()))?;
    }
    Ok(out)
}

/// `len` elements of `dtype` on `account`'s device, each `value`.
pub(in crate::backend::host) fn fill(
    account: &'static MemoryAccount,
    dtype: DType,
    len: usize,
    value: Scalar,
) -> Result<HostBuffer> {
    launch(
        Launch::new("fill", account, dtype, len),
        &[],
        Box::new(move |_, out| with_dtype!(dtype, T => init::fill(typed_mut::<T>(out), T::from_scalar(value)))),
    )
}

/// `start, start + step, ...`: `len` elements of `dtype` on `account`'s device.
pub(in crate::backend::host) fn arange(
    account: &'static MemoryAccount,
    dtype: DType,
    len: usize,
    start: f64,
    step: f64,
) -> Result<HostBuffer> {
    launch(
        Launch::new("arange", account, dtype, len),
        &[],
        Box::new(move |_, out| with_dtype!(dtype, T => init::arange(typed_mut::<T>(out), start, step))),
    )
}

/// `len` samples of `dist` (uniform in `[0, 1)` or standard normal) of a float `dtype` on
/// `account`'s device.
pub(in crate::backend::host) fn rand(
    account: &'static MemoryAccount,
    dtype: DType,
    len: usize,
    seed: u64,
    dist: Dist,
) -> Result<HostBuffer> {
    float_only(dist.name(), dtype)?;
    launch(
        Launch::new(dist.name(), account, dtype, len),
        &[],
        Box::new(move |_, out| match dtype {
            DType::F64 => init::rand(typed_mut::<f64>(out), seed, dist),
            DType::BF16 => init::rand(typed_mut::<half::bf16>(out), seed, dist),
            DType::F16 => init::rand(typed_mut::<half::f16>(out), seed, dist),
            _ => init::rand(typed_mut::<f32>(out), seed, dist),
        }),
    )
}

/// Queues a copy of all of `src` into `dst` (the same length) on `s` as op `op`, and
/// returns an event recorded right after it: what an async DMA is on the GPU. The caller
/// has ordered `src`'s last write before this point of `s`, and keeps `dst` (and pinned
/// memory in `src`) from every other use until the event (`hold_until`).
pub(in crate::backend::host) fn queue_copy(
    s: &Arc<HostStream>,
    op: &'static str,
    src: &HostBuffer,
    dst: &HostBuffer,
) -> Result<Arc<HostEvent>> {
    let (from, mut to) = (src.span(), dst.span());
    let uses = [(src.region(None), Kind::Read), (dst.region(None), Kind::Write)];
    s.launch(
        op,
        &uses,
        Box::new(move || {
            // The checker books both uses.
            // SAFETY: the source was written before this point of the stream and the destination is
            // used by nothing else until the event below (the caller's contract above).
            let copied = unsafe { kernels::copy(to.bytes_mut(), from.bytes()) };
            // The caller checked that both have the same length.
            if let Err(e) = copied {
                panic!("{e}");
            }
        }),
    )?;
    let done = Arc::new(HostEvent::default());
    if let Err(e) = done.record(s) {
        // The copy is queued but its end unmarked (as the cuda backend's `marked`): wait
        // for it, or never reuse the pinned memory it may still use.
        if s.synchronize().is_err() {
            src.retire();
            dst.retire();
        }
        return Err(e);
    }
    Ok(done)
}
