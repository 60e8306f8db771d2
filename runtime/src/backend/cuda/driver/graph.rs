//! CUDA graphs: a stream's work captured once (`cuStreamBeginCapture`, relaxed mode, so
//! that the private pool may allocate) and replayed with one `cuGraphLaunch`.
//!
//! A capture owns what the graph needs beyond the driver's graph:
//! - the device's *graph stream* as its pool: memory made during the capture is
//!   allocated there (never from a cache that a user's stream fills), belongs to the
//!   graph and is freed there when the capture is dropped, after every stream the graph
//!   was replayed on; a replay's stream first waits for the allocations;
//! - the graph's inputs: the only memory made before the capture that captured work may
//!   read (`CudaBuffer::use_on` asks [`CudaCapture::check_input`]), and the indices in them
//!   that captured ops read, checked before each replay (`flag::check_rules`) unless the
//!   inputs' last writes were checked at their sources (`sync::checked`);
//! - the streams that joined it by waiting for one of its events (a fork), as the driver
//!   joins them;
//! - blocks freed during the capture whose free would otherwise be ordered on a
//!   captured stream (and so become part of the graph).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use cudarc::driver::{result, sys};

use crate::backend::cuda::driver::device::{driver, failure, DeviceState, Handle, LAUNCH};
use crate::backend::cuda::driver::event::CudaEvent;
use crate::backend::cuda::driver::flag::check_rules;
use crate::backend::cuda::driver::stream::CudaStream;
use crate::backend::cuda::driver::timing;
use crate::backend::sync::capture::IndexRule;
use crate::backend::sync::checked;
use crate::error::{Error, Result};
use crate::faults::{gate, Point};

/// One capture, and then the memory of its graph.
pub(crate) struct CudaCapture {
    dev: &'static DeviceState,
    pool: Arc<CudaStream>,
    /// Device addresses of the graph's inputs.
    inputs: Vec<sys::CUdeviceptr>,
    ended: AtomicBool,
    /// Streams that joined the capture, kept alive until it ends.
    joined: Mutex<Vec<Arc<CudaStream>>>,
    /// Blocks to free when the capture goes, each after the streams listed with it.
    retired: Mutex<Vec<(sys::CUdeviceptr, Vec<Arc<CudaStream>>)>>,
    /// Every stream the graph was replayed on.
    replayed_on: Mutex<Vec<Arc<CudaStream>>>,
    /// Buffers made in the capture that are alive.
    live: AtomicUsize,
    /// Bytes of buffers that went but whose memory the graph still holds.
    held: AtomicUsize,
    /// Indices in the inputs that captured ops read, checked before each replay.
    rules: Mutex<Vec<IndexRule>>,
    /// This capture's key among the inputs' verdicts (`sync::checked`).
    id: u64,
}

impl std::fmt::Debug for CudaCapture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "capture on cuda:{}", self.dev.ordinal)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl CudaCapture {
    /// The stream the graph's memory is allocated and freed on.
    pub(crate) fn pool(&self) -> &Arc<CudaStream> {
        &self.pool
    }

    pub(crate) fn ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    /// Captured work may read memory at `ptr` only if it is one of the graph's inputs.
    pub(crate) fn check_input(&self, ptr: sys::CUdeviceptr) -> Result<()> {
        if self.inputs.contains(&ptr) {
            return Ok(());
        }
        Err(crate::backend::sync::capture::not_an_input())
    }

    /// Keeps `rule`, for the replays to check.
    pub(crate) fn require(&self, rule: IndexRule) {
        let mut rules = lock(&self.rules);
        if !rules.contains(&rule) {
            rules.push(rule);
        }
        checked::register(self.dev.id(), self.id, rule);
    }

    /// Counts a buffer made in the capture coming (`true`) or going.
    pub(crate) fn count_buffer(&self, alive: bool) {
        if alive {
            self.live.fetch_add(1, Ordering::SeqCst);
        } else {
            self.live.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Frees the block at `ptr` of `bytes` bytes (still counted as allocated) when the
    /// capture goes, after the streams in `after`.
    pub(crate) fn retire(&self, ptr: sys::CUdeviceptr, bytes: usize, after: Vec<Arc<CudaStream>>) {
        self.held.fetch_add(bytes, Ordering::SeqCst);
        lock(&self.retired).push((ptr, after));
    }
}

impl Drop for CudaCapture {
    fn drop(&mut self) {
        checked::unregister(self.dev.id(), self.id);
        self.dev.account.release(*self.held.get_mut());
        if self.dev.bind().is_err() {
            return; // nothing can be ordered: the blocks are not reused
        }
        let replays = std::mem::take(&mut *lock(&self.replayed_on));
        'block: for (ptr, after) in std::mem::take(&mut *lock(&self.retired)) {
            for s in after.iter().chain(&replays) {
                // A stream being captured (into another graph) cannot be waited for now:
                // the wait would join the pool stream to that capture. Leak the block.
                if s.capture().is_some() {
                    continue 'block;
                }
                if !Arc::ptr_eq(s, &self.pool) && self.pool.wait_for(s).is_err() {
                    continue 'block; // a use cannot be ordered before the free: leak it
                }
            }
            // SAFETY: the block came from cuMemAllocAsync on this device (on the pool stream or a stream's cache) and
            // is freed once, here; every stream that used it, and every replay of the graph, is ordered before this
            // point of the pool stream (the waits above); the context is current (bind above).
            let _ = unsafe { result::free_async(ptr, self.pool.raw.0) };
        }
    }
}

/// `on` waits for work of the capture `c` (an event recorded in it, or a stream in it):
/// a stream outside any capture joins it, as the driver makes it; an ended capture, or
/// another one, is an error.
pub(crate) fn joins(on: &Arc<CudaStream>, c: Option<Weak<CudaCapture>>) -> Result<()> {
    if let Some(c) = crate::backend::sync::capture::joining(c, on.capture(), CudaCapture::ended)? {
        on.set_capture(Some(&c));
        lock(&c.joined).push(Arc::clone(on));
    }
    Ok(())
}

/// Starts capturing `s`: ops queued on it are recorded, not run. Captured work may read
/// `inputs` and memory made during the capture only.
pub(crate) fn begin(dev: &'static DeviceState, s: &Arc<CudaStream>, inputs: Vec<sys::CUdeviceptr>) -> Result<()> {
    if s.capture().is_some() {
        return Err(Error::NotCapturable {
            op: "Graph::capture",
            reason: "the stream is already being captured".into(),
        });
    }
    dev.bind()?;
    // A matmul's cuBLAS handle is made outside the capture: making one inside would
    // allocate its workspace into the graph.
    s.blas()?;
    let pool = Arc::clone(dev.graph_stream()?);
    let c = Arc::new(CudaCapture {
        dev,
        pool,
        inputs,
        ended: AtomicBool::new(false),
        joined: Mutex::new(Vec::new()),
        retired: Mutex::new(Vec::new()),
        replayed_on: Mutex::new(Vec::new()),
        live: AtomicUsize::new(0),
        held: AtomicUsize::new(0),
        rules: Mutex::new(Vec::new()),
        id: checked::capture_id(),
    });
    // SAFETY: the stream is alive (held by `s`) and not being captured (checked above);
    // relaxed mode lets the graph's pool allocate on its own stream meanwhile.
    unsafe { result::stream::begin_capture(s.raw.0, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED) }
        .map_err(driver(dev.ordinal, "cuStreamBeginCapture"))?;
    s.set_capture(Some(&c));
    Ok(())
}

/// A captured graph, ready to replay.
pub(crate) struct CudaGraph {
    exec: Handle<sys::CUgraphExec>,
    capture: Arc<CudaCapture>,
    /// Recorded on the pool stream after the graph's allocations.
    allocated: CudaEvent,
}

impl std::fmt::Debug for CudaGraph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "graph on cuda:{}", self.capture.dev.ordinal)
    }
}

/// Ends the capture of `s` and instantiates its graph.
pub(crate) fn end(s: &Arc<CudaStream>) -> Result<CudaGraph> {
    let c = s.capture().ok_or_else(|| Error::InvalidArgument {
        op: "Graph::capture",
        reason: "the stream is not being captured".into(),
    })?;
    let dev = c.dev;
    dev.bind()?;
    // SAFETY: the stream is alive and being captured (checked above).
    let ended = unsafe { result::stream::end_capture(s.raw.0) };
    c.ended.store(true, Ordering::SeqCst);
    s.set_capture(None);
    for j in std::mem::take(&mut *lock(&c.joined)) {
        j.set_capture(None);
    }
    let graph = ended.map_err(|e| match e.0 {
        sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_UNJOINED => crate::backend::sync::capture::unjoined(),
        sys::CUresult::CUDA_ERROR_STREAM_CAPTURE_INVALIDATED => Error::InvalidArgument {
            op: "Graph::capture",
            reason: "the driver invalidated the capture (another thread synchronized a captured stream?)".into(),
        },
        _ => driver(dev.ordinal, "cuStreamEndCapture")(e),
    })?;
    // SAFETY: `graph` is the valid graph the capture returned; instantiating copies it.
    let exec = unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) }
        .map_err(driver(dev.ordinal, "cuGraphInstantiate"));
    // SAFETY: the graph is ours, and the executable graph no longer needs it.
    let _ = unsafe { result::graph::destroy(graph) };
    let exec = exec?;
    // The graph's memory was allocated on the pool stream: a replay's stream first waits
    // for this point of it (once per stream, in `launch`).
    let allocated = CudaEvent::create(dev.ordinal, dev.ctx.cu_ctx(), false)?;
    allocated.record(&c.pool)?;
    Ok(CudaGraph { exec: Handle(exec), capture: c, allocated })
}

impl CudaGraph {
    /// Whether `b` was made in this graph's capture.
    pub(crate) fn owns(&self, b: &crate::backend::cuda::CudaBuffer) -> bool {
        b.made_in(&self.capture)
    }

    /// Buffers made in the capture that are still alive.
    pub(crate) fn live_buffers(&self) -> usize {
        self.capture.live.load(Ordering::SeqCst)
    }

    /// Queues one replay on `s`, a stream of the graph's device not being captured.
    pub(crate) fn launch(&self, s: &Arc<CudaStream>) -> Result<()> {
        let c = &self.capture;
        if s.ordinal != c.dev.ordinal {
            return Err(Error::InvalidArgument {
                op: "Graph::replay_on",
                reason: format!("the graph is of cuda:{}, the stream of cuda:{}", c.dev.ordinal, s.ordinal),
            });
        }
        if s.capture().is_some() {
            return Err(Error::NotCapturable {
                op: "Graph::replay",
                reason: "a graph cannot replay inside a capture; replay it before or after".into(),
            });
        }
        c.dev.bind()?;
        // The indices captured ops read from the inputs, before anything of the replay runs:
        // the verdicts of the inputs' last writes when every input has one (no wait), else
        // checked here (a wait for the inputs' writes, and so for the replays before them).
        let rules = lock(&c.rules).clone();
        match checked::verdicts(c.dev.id(), &rules) {
            Some(verdict) => verdict?,
            None => check_rules(c.dev, s, &rules)?,
        }
        let mut on = lock(&c.replayed_on);
        let first = !on.iter().any(|r| Arc::ptr_eq(r, s));
        if first {
            s.wait(&self.allocated)?;
        }
        // The graph reads its inputs (borrowed by the `Graph`, ordered on `s` by the caller)
        // and its own memory, freed only after every stream it was replayed on (below).
        let span = timing::begin(s);
        // SAFETY: so, and the executable graph is alive (destroyed only in drop), `s` a live stream of its device.
        let r = gate(Point::Launch, failure(LAUNCH), || unsafe { result::graph::launch(self.exec.0, s.raw.0) })
            .map_err(driver(s.ordinal, "cuGraphLaunch"));
        timing::finish(span, s, &r, || ("graph replay".into(), String::new()));
        r?;
        if first {
            on.push(Arc::clone(s));
        }
        Ok(())
    }
}

impl Drop for CudaGraph {
    fn drop(&mut self) {
        if self.capture.dev.bind().is_err() {
            return; // the executable graph leaks rather than go while a replay may run
        }
        for s in lock(&self.capture.replayed_on).iter() {
            // A stream being captured cannot be synchronized (the capture would break):
            // the executable graph leaks instead.
            if s.capture().is_some() || s.synchronize().is_err() {
                return;
            }
        }
        // SAFETY: no replay runs any more (the streams it was launched on are idle), and
        // the executable graph is destroyed once, here.
        let _ = unsafe { result::graph::exec_destroy(self.exec.0) };
    }
}
