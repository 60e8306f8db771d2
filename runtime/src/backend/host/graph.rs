//! Graphs on the host backend: while a simulated stream is captured, the jobs its ops
//! would queue are recorded instead, in the order the host issued them (streams that
//! join the capture record into the same list, so every wait between captured streams
//! is already kept by that order), and a replay queues one job that runs them all.
//!
//! The rules are the cuda backend's: captured work reads the graph's inputs and memory
//! made in the capture only; a stream joins by waiting for an event or a write of the
//! capture, and must be joined back before the capture ends; events recorded in a
//! capture cannot be waited for outside it. The hazard checker sees a replay as one op
//! that reads the inputs and writes the outputs.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};

use crate::backend::account::MemoryAccount;
use crate::backend::host::buffer::HostBuffer;
use crate::backend::host::queue::Job;
use crate::backend::host::streams::{use_on_stream, HostStream};
use crate::backend::sync::capture::{self, IndexRule, Indexed};
use crate::backend::sync::checked;
use crate::backend::sync::hazard::{self, Kind};
use crate::backend::BackendStorage;
use crate::device_id::DeviceId;
use crate::error::{Error, Result};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One capture: the recorded jobs, the inputs, the streams that joined.
#[derive(Debug)]
pub(crate) struct HostCapture {
    device: DeviceId,
    /// Addresses of the graph's inputs.
    inputs: Vec<usize>,
    jobs: Mutex<Vec<RecordedJob>>,
    /// Streams that joined, with their write count when they did.
    joined: Mutex<Vec<(Arc<HostStream>, u64)>>,
    ended: AtomicBool,
    /// Buffers made in the capture that are alive.
    live: AtomicUsize,
    /// Bytes of buffers that went but whose memory recorded jobs still hold: counted as
    /// allocated on `account` until the capture goes.
    held: AtomicUsize,
    account: &'static MemoryAccount,
    /// Indices in the inputs that captured ops read, checked before each replay.
    rules: Mutex<Vec<IndexRule>>,
    /// This capture's key among the inputs' verdicts (`sync::checked`).
    id: u64,
}

impl Drop for HostCapture {
    fn drop(&mut self) {
        checked::unregister(self.device, self.id);
        self.account.release(*self.held.get_mut());
    }
}

/// A job as recorded: run once per replay.
struct RecordedJob(Job);

impl std::fmt::Debug for RecordedJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("job")
    }
}

impl HostCapture {
    pub(crate) fn ended(&self) -> bool {
        self.ended.load(Ordering::SeqCst)
    }

    /// Counts a buffer made in the capture coming (`true`) or going.
    pub(in crate::backend::host) fn count_buffer(&self, alive: bool) {
        if alive {
            self.live.fetch_add(1, Ordering::SeqCst);
        } else {
            self.live.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Keeps `bytes` of a buffer that went counted until the capture goes.
    pub(in crate::backend::host) fn hold(&self, bytes: usize) {
        self.held.fetch_add(bytes, Ordering::SeqCst);
    }

    /// Records `job` instead of queueing it.
    pub(in crate::backend::host) fn record(&self, job: Job) {
        lock(&self.jobs).push(RecordedJob(job));
    }

    /// A captured op reads `count` indices (`of`) from `index`: an input of the graph,
    /// whose replays check them first; indices made in the capture are an error.
    pub(in crate::backend::host) fn require(
        self: &Arc<Self>,
        index: &HostBuffer,
        count: usize,
        of: Indexed,
    ) -> Result<()> {
        let rule = IndexRule { addr: index.addr() as u64, count, of };
        if self.may_read(index)? {
            return Err(capture::computed_indices(rule.op()));
        }
        let mut rules = lock(&self.rules);
        if !rules.contains(&rule) {
            rules.push(rule);
        }
        checked::register(self.device, self.id, rule);
        Ok(())
    }

    /// Captured work may read `h` if it was made in this capture or is an input.
    pub(in crate::backend::host) fn may_read(self: &Arc<Self>, h: &HostBuffer) -> Result<bool> {
        if h.graph.as_ref().is_some_and(|g| Arc::ptr_eq(g, self)) {
            return Ok(true);
        }
        if self.inputs.contains(&h.addr()) {
            return Ok(false);
        }
        Err(capture::not_an_input())
    }
}

/// `on` waits for work of capture `c` (an event recorded in it, or a stream in it): a
/// stream outside any capture joins it; an ended capture, or another one, is an error.
pub(in crate::backend::host) fn joins(on: &Arc<HostStream>, c: Option<Weak<HostCapture>>) -> Result<()> {
    if let Some(c) = capture::joining(c, on.capture(), HostCapture::ended)? {
        lock(&c.joined).push((Arc::clone(on), on.order.writes()));
        on.set_capture(Some(c));
    }
    Ok(())
}

/// Starts capturing `s`; captured work may read `inputs` and memory made in the capture.
pub(in crate::backend::host) fn begin(s: &Arc<HostStream>, inputs: &[&HostBuffer]) -> Result<()> {
    if s.capture().is_some() {
        return Err(Error::NotCapturable {
            op: "Graph::capture",
            reason: "the stream is already being captured".into(),
        });
    }
    for h in inputs {
        // The stream waits for the inputs' writers now; each replay orders them again.
        use_on_stream(h, s)?;
    }
    let c = HostCapture {
        device: s.device,
        inputs: inputs.iter().map(|h| h.addr()).collect(),
        jobs: Mutex::new(Vec::new()),
        joined: Mutex::new(Vec::new()),
        ended: AtomicBool::new(false),
        live: AtomicUsize::new(0),
        held: AtomicUsize::new(0),
        account: crate::backend::host::host().account(s.device)?,
        rules: Mutex::new(Vec::new()),
        id: checked::capture_id(),
    };
    s.set_capture(Some(Arc::new(c)));
    Ok(())
}

/// A recorded graph, ready to replay.
#[derive(Debug)]
pub(crate) struct HostGraph {
    device: DeviceId,
    jobs: Arc<Mutex<Vec<RecordedJob>>>,
    capture: Arc<HostCapture>,
}

/// Ends the capture of `s`: an error, and no graph, when a stream that joined was not
/// joined back.
pub(in crate::backend::host) fn end(s: &Arc<HostStream>) -> Result<HostGraph> {
    let c = s.capture().ok_or_else(|| Error::InvalidArgument {
        op: "Graph::capture",
        reason: "the stream is not being captured".into(),
    })?;
    c.ended.store(true, Ordering::SeqCst);
    s.set_capture(None);
    let joined = std::mem::take(&mut *lock(&c.joined));
    let mut unjoined = false;
    for (j, at_join) in &joined {
        j.set_capture(None);
        let writes = j.order.writes();
        unjoined |= writes > *at_join && !s.order.has_waited(j.key, writes);
    }
    if unjoined {
        return Err(capture::unjoined());
    }
    let jobs = std::mem::take(&mut *lock(&c.jobs));
    Ok(HostGraph { device: c.device, jobs: Arc::new(Mutex::new(jobs)), capture: c })
}

impl HostGraph {
    /// Whether `h` was made in this graph's capture.
    pub(crate) fn owns(&self, h: &HostBuffer) -> bool {
        h.graph.as_ref().is_some_and(|g| Arc::ptr_eq(g, &self.capture))
    }

    /// Buffers made in the capture that are still alive.
    pub(crate) fn live_buffers(&self) -> usize {
        self.capture.live.load(Ordering::SeqCst)
    }

    /// Queues one replay on `s`: one job running the recorded ones in order. It reads
    /// `reads` and writes `writes`, as the hazard checker books it.
    pub(in crate::backend::host) fn launch(
        &self,
        s: &Arc<HostStream>,
        reads: &[&HostBuffer],
        writes: &[&HostBuffer],
    ) -> Result<()> {
        if s.device != self.device {
            return Err(Error::InvalidArgument {
                op: "Graph::replay_on",
                reason: format!("the graph is of {}, the stream of {}", self.device, s.device),
            });
        }
        if s.capture().is_some() {
            return Err(Error::NotCapturable {
                op: "Graph::replay",
                reason: "a graph cannot replay inside a capture; replay it before or after".into(),
            });
        }
        self.check_rules(s, reads)?;
        let mut uses = Vec::new();
        if HostStream::uses_wanted() {
            uses.extend(reads.iter().filter(|h| h.len() > 0).map(|h| (h.region(None), Kind::Read)));
            uses.extend(writes.iter().filter(|h| h.len() > 0).map(|h| (h.region(None), Kind::Write)));
        }
        let jobs = Arc::clone(&self.jobs);
        s.launch(
            "Graph::replay",
            &uses,
            Box::new(move || {
                for RecordedJob(job) in lock(&jobs).iter_mut() {
                    job();
                }
            }),
        )?;
        Ok(())
    }

    /// Checks the indices of every rule on `s` (ordered after the inputs' writers) before
    /// a replay: the error of the first rule with an index out of range. The inputs'
    /// verdicts instead when every input has one (`sync::checked`): no wait.
    fn check_rules(&self, s: &Arc<HostStream>, reads: &[&HostBuffer]) -> Result<()> {
        let rules = lock(&self.capture.rules).clone();
        if let Some(verdict) = checked::verdicts(self.device, &rules) {
            return verdict;
        }
        let mut spans = Vec::with_capacity(rules.len());
        for r in rules {
            let Some(h) = reads.iter().find(|h| h.addr() as u64 == r.addr) else {
                return Err(Error::InvalidArgument {
                    op: "Graph::replay",
                    reason: format!("the indices of a captured {} are not among the graph's inputs", r.op()),
                });
            };
            spans.push((*h, r));
        }
        match check_on(s, &spans)? {
            Some((i, at, v)) => Err(spans[i].1.error(at, v.into())),
            None => Ok(()),
        }
    }
}

/// `limits` (`(count, bound)`, a graph input's rules) checked against the first i32 of
/// `indices`, the source of a write into that input, on the current stream after the
/// source's writes: the first limit broken, as `(limit, position, index)`.
pub(in crate::backend::host) fn check_source(
    indices: &HostBuffer,
    limits: &[(usize, usize)],
) -> Result<Option<(usize, usize, i32)>> {
    let s = crate::backend::host::streams::current_stream(BackendStorage::device_id(indices));
    use_on_stream(indices, &s)?;
    if let Some(&(count, _)) = limits.iter().find(|l| l.0.checked_mul(4).is_none_or(|b| b > indices.len())) {
        return Err(Error::InvalidArgument {
            op: "copy_from",
            reason: format!("{count} indices to check in a source of {} bytes", indices.len()),
        });
    }
    let spans: Vec<(&HostBuffer, IndexRule)> =
        limits.iter().map(|&l| (indices, IndexRule::limit(indices.addr() as u64, l))).collect();
    check_on(&s, &spans)
}

/// One job on `s` checking each rule against its buffer's bytes, waited for: the first
/// rule with an index out of range, as `(rule, position, index)`.
fn check_on(s: &Arc<HostStream>, spans: &[(&HostBuffer, IndexRule)]) -> Result<Option<(usize, usize, i32)>> {
    if spans.is_empty() {
        return Ok(None);
    }
    let uses = match hazard::enabled() {
        true => spans.iter().map(|(h, _)| (h.region(None), Kind::Read)).collect(),
        false => Vec::new(),
    };
    let spans: Vec<_> = spans.iter().map(|(h, r)| (h.span(), *r)).collect();
    let result = Arc::new(Mutex::new(None));
    let slot = Arc::clone(&result);
    let check = Box::new(move || {
        let bad = spans.iter().enumerate().find_map(|(i, (span, rule))| {
            // SAFETY: the job runs on `s` after the buffers' last writes (the callers ordered
            // them), and nothing writes them meanwhile: a graph's input while the graph borrows
            // it, a source while the write that reads it holds it.
            let bytes = unsafe { span.bytes() };
            rule.first_bad(bytes).map(|(at, v)| (i, at, v))
        });
        *lock(&slot) = bad;
    });
    let (seq, clock) = s.launch("index_check", &uses, check)?;
    s.wait_job(seq, &clock)?;
    let bad = lock(&result).take();
    Ok(bad)
}
