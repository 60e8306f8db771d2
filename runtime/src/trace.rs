//! Traces: what every stream and thread did, in the Chrome trace-event format that
//! Perfetto (<https://ui.perfetto.dev>) and `chrome://tracing` open.
//!
//! [`start`] (or `LOCUS_TRACE=path.json`, read when the backend starts) opens the file;
//! from then on every op a stream runs is a slice on that stream's track (one process per
//! device, one thread per stream), a cross-stream wait is a `wait` slice with a flow arrow
//! from the end of the op it waits for, and a [`Range`] (the [`range!`](crate::range)
//! macro) is a slice on its thread's track, nested by time. [`stop`] closes the file.
//! Events reach the file from a writer thread as they come, each batch flushed; a process
//! that exits without calling `stop` has it called at exit, and one that dies leaves a
//! trace whose last `]` is missing, which both viewers accept.
//!
//! Off, the cost is one atomic load per op. The host backend traces its simulated streams
//! (the times of their workers); the cuda backend records ranges and host-side events
//! only, not yet device times.
//!
//! ```
//! # extern crate locus_runtime as locus;
//! use locus::{trace, Cuda, Tensor};
//! let path = std::env::temp_dir().join(format!("locus-doc-trace-{}.json", std::process::id()));
//! trace::start(&path)?;
//! {
//!     let _step = locus::range!("step {}", 0);
//!     let x = Tensor::<Cuda<0>>::ones([4])?;
//!     assert_eq!((&x + &x)?.to_vec()?, vec![2.0; 4]);
//! }
//! trace::stop()?;
//! let text = std::fs::read_to_string(&path)?;
//! assert!(text.contains(r#""name":"step 0""#));
//! # std::fs::remove_file(&path).ok();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashSet;
use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::Instant;

use crate::device_id::DeviceId;
use crate::error::{Error, Result};

/// Whether a trace is being written (the one check an op makes).
static ON: AtomicBool = AtomicBool::new(false);
static STATE: Mutex<Option<Recorder>> = Mutex::new(None);
/// Time zero of every trace of this process.
static EPOCH: OnceLock<Instant> = OnceLock::new();
static NEXT_FLOW: AtomicU64 = AtomicU64::new(1);
/// How many traces this process started: a backend's books of one trace (the cuda
/// backend's time anchors) are not reused in the next.
static GENERATION: AtomicU64 = AtomicU64::new(0);
/// What [`stop`] runs before it closes the file: the backends' hooks that write the events
/// they still hold (device times not yet known).
static ON_STOP: Mutex<Vec<fn()>> = Mutex::new(Vec::new());
static NEXT_THREAD: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// This thread's number on the host track.
    static THREAD: u64 = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

/// The process id of the host's threads; a device's is this plus one plus its ordinal.
const HOST_PID: u64 = 1;

struct Recorder {
    path: PathBuf,
    tx: Sender<String>,
    writer: JoinHandle<std::io::Result<()>>,
    /// Tracks named so far.
    named: HashSet<(u64, u64)>,
}

/// Where a slice goes: a stream of a device, or the calling thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Track {
    /// Stream `key` (process-unique) of `device`; `number` is its number on the device
    /// (0: the default stream).
    Stream { device: DeviceId, key: u64, number: u64 },
    /// The thread that records the event.
    Thread,
}

impl Track {
    fn ids(self) -> (u64, u64) {
        match self {
            Track::Stream { device, key, .. } => {
                (device.ordinal().map_or(HOST_PID + 1000, |o| HOST_PID + 1 + o as u64), key)
            }
            Track::Thread => (HOST_PID, THREAD.with(|t| *t)),
        }
    }

    /// The metadata events naming this track's process and thread.
    fn names(self, (pid, tid): (u64, u64)) -> [String; 3] {
        let (process, thread, sort) = match self {
            Track::Stream { device, number, .. } => {
                let s = if number == 0 { "default stream".to_string() } else { format!("stream {number}") };
                (device.to_string(), s, number)
            }
            Track::Thread => {
                let name = std::thread::current().name().map_or_else(|| format!("thread {tid}"), str::to_string);
                ("host".to_string(), name, tid)
            }
        };
        [
            format!(r#"{{"ph":"M","name":"process_name","pid":{pid},"tid":0,"args":{{"name":{}}}}}"#, quote(&process)),
            format!(
                r#"{{"ph":"M","name":"thread_name","pid":{pid},"tid":{tid},"args":{{"name":{}}}}}"#,
                quote(&thread)
            ),
            format!(
                r#"{{"ph":"M","name":"thread_sort_index","pid":{pid},"tid":{tid},"args":{{"sort_index":{sort}}}}}"#
            ),
        ]
    }
}

fn lock() -> MutexGuard<'static, Option<Recorder>> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

fn io_err(path: &Path, e: std::io::Error) -> Error {
    Error::InvalidArgument { op: "trace", reason: format!("cannot write the trace {}: {e}", path.display()) }
}

/// Starts writing a trace to `path` (created, or truncated). An `Err` if a trace is
/// already being written or the file cannot be created.
pub fn start(path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    let mut state = lock();
    if let Some(r) = state.as_ref() {
        return Err(Error::InvalidArgument {
            op: "trace::start",
            reason: format!("a trace is already being written to {}; stop it first", r.path.display()),
        });
    }
    let file = File::create(path).map_err(|e| io_err(path, e))?;
    EPOCH.get_or_init(Instant::now);
    let (tx, rx) = mpsc::channel();
    let writer = std::thread::Builder::new()
        .name("locus-trace".into())
        .spawn(move || write_all(BufWriter::new(file), rx))
        .map_err(|e| Error::Thread { message: format!("the trace writer: {e}") })?;
    *state = Some(Recorder { path: path.to_path_buf(), tx, writer, named: HashSet::new() });
    GENERATION.fetch_add(1, Ordering::AcqRel);
    ON.store(true, Ordering::Release);
    stop_at_exit();
    Ok(())
}

/// Makes the process's exit (a return from `main`, `std::process::exit`) stop the trace
/// being written, so its last events and the closing `]` reach the file.
fn stop_at_exit() {
    #[cfg(target_os = "linux")]
    {
        static REGISTERED: std::sync::Once = std::sync::Once::new();
        extern "C" fn at_exit() {
            if is_on() {
                let _ = stop();
            }
        }
        REGISTERED.call_once(|| {
            // SAFETY: `at_exit` is a plain `extern "C" fn()` that stays valid for the
            // life of the process; libc calls it once, at exit.
            let _ = unsafe { libc::atexit(at_exit) };
        });
    }
}

/// Stops the trace and closes its file, once every event recorded before has been
/// written; returns its path. An `Err` if no trace is being written, or writing failed.
pub fn stop() -> Result<PathBuf> {
    if is_on() {
        let hooks = ON_STOP.lock().unwrap_or_else(|p| p.into_inner()).clone();
        for hook in hooks {
            hook();
        }
    }
    let r = lock().take();
    ON.store(false, Ordering::Release);
    let Some(Recorder { path, tx, writer, .. }) = r else {
        return Err(Error::InvalidArgument { op: "trace::stop", reason: "no trace is being written".into() });
    };
    drop(tx);
    match writer.join() {
        Ok(r) => r.map_err(|e| io_err(&path, e))?,
        Err(_) => return Err(io_err(&path, std::io::Error::other("the trace writer panicked"))),
    }
    Ok(path)
}

/// Whether a trace is being written.
#[inline]
pub fn is_on() -> bool {
    // A build with `--cfg locus_no_trace_hooks` has no tracing at all: the A side of the
    // bench row that measures what the hooks cost when off (docs/BENCHMARKS.md).
    !cfg!(locus_no_trace_hooks) && ON.load(Ordering::Acquire)
}

/// The number of the trace being written (or last written): one more for each [`start`].
pub(crate) fn generation() -> u64 {
    GENERATION.load(Ordering::Acquire)
}

/// Makes [`stop`] run `hook` first (once per hook, however often it is registered): a
/// backend writes there the events it still holds.
pub(crate) fn on_stop(hook: fn()) {
    let mut hooks = ON_STOP.lock().unwrap_or_else(|p| p.into_inner());
    if !hooks.iter().any(|h| std::ptr::fn_addr_eq(*h, hook)) {
        hooks.push(hook);
    }
}

/// Starts the trace `LOCUS_TRACE` names, if any (when the backend starts).
pub(crate) fn start_from_env() -> std::result::Result<(), String> {
    match std::env::var_os("LOCUS_TRACE") {
        Some(p) if !p.is_empty() && !is_on() => start(PathBuf::from(p)).map_err(|e| format!("LOCUS_TRACE: {e}")),
        _ => Ok(()),
    }
}

/// The writer thread: `[`, the events as they come (flushed whenever none is waiting),
/// `]` once the recorder is gone.
fn write_all(mut out: BufWriter<File>, rx: Receiver<String>) -> std::io::Result<()> {
    out.write_all(b"[\n")?;
    let mut first = true;
    loop {
        let line = match rx.try_recv() {
            Ok(l) => l,
            Err(TryRecvError::Empty) => {
                out.flush()?;
                match rx.recv() {
                    Ok(l) => l,
                    Err(_) => break,
                }
            }
            Err(TryRecvError::Disconnected) => break,
        };
        if !first {
            out.write_all(b",\n")?;
        }
        first = false;
        out.write_all(line.as_bytes())?;
    }
    out.write_all(b"\n]\n")?;
    out.flush()
}

/// Microseconds since the trace's time zero, to the nanosecond.
fn micros(at: Instant) -> String {
    let ns = at.saturating_duration_since(*EPOCH.get_or_init(Instant::now)).as_nanos();
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

/// `s` as a JSON string.
fn quote(s: &str) -> String {
    let mut q = String::with_capacity(s.len() + 2);
    q.push('"');
    for c in s.chars() {
        match c {
            '"' => q.push_str("\\\""),
            '\\' => q.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(q, "\\u{:04x}", c as u32);
            }
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

/// Sends the events of `track`, naming the track first if it is new.
fn emit(track: Track, lines: impl FnOnce((u64, u64)) -> Vec<String>) {
    let ids = track.ids();
    let mut state = lock();
    let Some(r) = state.as_mut() else { return };
    if r.named.insert(ids) {
        for l in track.names(ids) {
            let _ = r.tx.send(l);
        }
    }
    for l in lines(ids) {
        let _ = r.tx.send(l);
    }
}

/// A slice `name` of category `cat` on `track` from `begin` to `end`, with `args` (the
/// inside of a JSON object, or empty).
pub(crate) fn slice(track: Track, name: &str, cat: &str, begin: Instant, end: Instant, args: &str) {
    if !is_on() {
        return;
    }
    let dur = end.saturating_duration_since(begin).as_nanos();
    emit(track, |(pid, tid)| {
        vec![format!(
            r#"{{"ph":"X","name":{},"cat":{},"pid":{pid},"tid":{tid},"ts":{},"dur":{}.{:03},"args":{{{args}}}}}"#,
            quote(name),
            quote(cat),
            micros(begin),
            dur / 1000,
            dur % 1000
        )]
    });
}

/// A flow arrow from `from` at `from_at` (inside a slice there) to the slice of `to` that
/// starts at `to_at`.
pub(crate) fn flow(name: &str, from: Track, from_at: Instant, to: Track, to_at: Instant) {
    if !is_on() {
        return;
    }
    let id = NEXT_FLOW.fetch_add(1, Ordering::Relaxed);
    let event = |ph: &str, bp: &str, (pid, tid): (u64, u64), at: Instant| {
        format!(
            r#"{{"ph":"{ph}",{bp}"name":{},"cat":"flow","id":{id},"pid":{pid},"tid":{tid},"ts":{}}}"#,
            quote(name),
            micros(at)
        )
    };
    emit(from, |ids| vec![event("s", "", ids, from_at)]);
    emit(to, |ids| vec![event("f", r#""bp":"e","#, ids, to_at)]);
}

/// A named range of the calling thread: a slice on its track from [`Range::new`] to the
/// drop (none if it is never dropped), and an NVTX range for a profiler that takes them
/// (Nsight Systems, Nsight Compute's `--nvtx`). Made by [`range!`](crate::range). It
/// stays on the thread that began it (NVTX ranges are per thread).
#[must_use = "the range ends when this value is dropped"]
#[derive(Debug)]
pub struct Range {
    name: Option<String>,
    nvtx: bool,
    begin: Instant,
    /// Not `Send`: the range ends on its own thread.
    _thread: std::marker::PhantomData<*const ()>,
}

impl Range {
    /// Begins the range `name` (nothing is recorded unless a trace is being written or a
    /// profiler takes NVTX ranges).
    pub fn new(name: impl Into<String>) -> Range {
        Range::named_by(|| name.into())
    }

    /// Begins a range whose name `name` makes only when something records it.
    pub fn named_by(name: impl FnOnce() -> String) -> Range {
        let nvtx = crate::nvtx::is_on();
        let name = (is_on() || nvtx).then(name);
        if let (true, Some(n)) = (nvtx, &name) {
            crate::nvtx::push(n);
        }
        Range { name, nvtx, begin: Instant::now(), _thread: std::marker::PhantomData }
    }
}

impl Drop for Range {
    fn drop(&mut self) {
        if let Some(name) = self.name.take() {
            if self.nvtx {
                crate::nvtx::pop();
            }
            slice(Track::Thread, &name, "range", self.begin, Instant::now(), "");
        }
    }
}

/// Begins a named range of this thread, which ends when the returned [`Range`] is
/// dropped: `let _r = locus::range!("forward");` or `locus::range!("step {i}")` with
/// `format!` arguments. A slice in the trace (see [`trace`](crate::trace)).
#[macro_export]
macro_rules! range {
    ($($fmt:tt)+) => {
        $crate::trace::Range::named_by(|| ::std::format!($($fmt)+))
    };
}

#[cfg(test)]
mod tests {
    use crate::trace::quote;

    #[test]
    fn names_are_json_strings() {
        assert_eq!(quote("a\"b\\c\n"), r#""a\"b\\c\u000a""#);
        assert_eq!(quote("µs"), "\"µs\"");
    }
}
