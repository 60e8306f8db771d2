//! The books of every device's memory blocks, for memory snapshots and for out-of-memory
//! errors that explain themselves.
//!
//! Each backend reports a block when it hands one to a buffer (fresh from the driver or
//! the system, or reused from a cache), when the buffer gives it back to a cache, and
//! when it goes back for good. The books hold the live blocks of each device (address,
//! size, bytes asked for, stream, whether cached), the totals, and, with
//! `LOCUS_MEMORY_HISTORY=1` (or [`record_history`]), the backtrace of each allocation and
//! an event history (the last [`HISTORY`] events), as PyTorch's
//! `torch.cuda.memory._record_memory_history` keeps them. `pickle` writes them as
//! PyTorch's snapshot.
//!
//! A block is booked under its device's lock: one short critical section per buffer made
//! or dropped. With history off nothing else is recorded.

pub(crate) mod pickle;

use std::backtrace::Backtrace;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::backend::fast_map::FastMap;
use crate::device_id::DeviceId;
use crate::error::Error;

/// Blocks up to this size are PyTorch's small segments (and locus's cache bins).
pub(crate) const CACHE_SMALL: usize = 1 << 20;

/// The most history events kept per device (PyTorch's default `max_entries`).
pub(crate) const HISTORY: usize = 100_000;

/// What happened to a block, in PyTorch's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Action {
    /// Memory asked of the driver (or the system) for a block: a new segment.
    SegmentAlloc,
    /// A block handed to a buffer.
    Alloc,
    /// The buffer let go: the block waits for the streams that used it.
    FreeRequested,
    /// The block is free for reuse (cached) .
    FreeCompleted,
    /// The block's memory went back to the driver.
    SegmentFree,
    /// An allocation failed.
    Oom,
}

impl Action {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Action::SegmentAlloc => "segment_alloc",
            Action::Alloc => "alloc",
            Action::FreeRequested => "free_requested",
            Action::FreeCompleted => "free_completed",
            Action::SegmentFree => "segment_free",
            Action::Oom => "oom",
        }
    }
}

/// A live block.
#[derive(Clone, Debug)]
pub(crate) struct Block {
    pub size: usize,
    /// Bytes the buffer asked for (0 while cached).
    pub requested: usize,
    /// The stream it belongs to (its process-unique number).
    pub stream: u64,
    /// Cached: free, kept for reuse on its stream.
    pub cached: bool,
    /// Where it was allocated, with history on.
    pub site: Option<Arc<Site>>,
}

/// One event of the history.
#[derive(Clone, Debug)]
pub(crate) struct Event {
    pub action: Action,
    /// The block's address; for [`Action::Oom`], the bytes the driver said were free.
    pub addr: u64,
    pub size: usize,
    pub stream: u64,
    pub time_us: u64,
    pub site: Option<Arc<Site>>,
}

/// An allocation site: a captured backtrace, resolved only when written.
#[derive(Debug)]
pub(crate) struct Site(Backtrace);

/// One frame of a site, as PyTorch's snapshot writes it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Frame {
    pub name: String,
    pub filename: String,
    pub line: u64,
}

impl Site {
    /// The frames of the backtrace, innermost first, without the allocator's own.
    pub(crate) fn frames(&self) -> Vec<Frame> {
        let text = self.0.to_string();
        let mut frames: Vec<Frame> = Vec::new();
        for line in text.lines() {
            let t = line.trim_start();
            if let Some((n, name)) = t.split_once(": ") {
                if n.chars().all(|c| c.is_ascii_digit()) {
                    frames.push(Frame { name: name.to_string(), filename: "??".into(), line: 0 });
                    continue;
                }
            }
            if let (Some(at), Some(f)) = (t.strip_prefix("at "), frames.last_mut()) {
                let mut parts = at.rsplitn(3, ':');
                let (_col, line, file) = (parts.next(), parts.next(), parts.next());
                if let (Some(file), Some(Ok(line))) = (file, line.map(str::parse)) {
                    f.filename = file.to_string();
                    f.line = line;
                }
            }
        }
        // Drop the frames of the capture and of the backend below the caller's op.
        let first = frames
            .iter()
            .rposition(|f| f.name.contains("backend::blocks") || f.name.contains("std::backtrace"))
            .map_or(0, |i| i + 1);
        frames.split_off(first.min(frames.len()))
    }

    /// The first frame outside locus and the standard library: where the user's code
    /// asked for the memory.
    pub(crate) fn caller(&self) -> Option<Frame> {
        self.frames().into_iter().find(|f| {
            !f.name.starts_with("locus")
                && !f.name.starts_with("<locus")
                && !f.name.starts_with("std::")
                && !f.name.starts_with("core::")
                && !f.name.starts_with("alloc::")
                && !f.name.starts_with("<alloc")
                && !f.name.starts_with("<core")
                && !f.name.starts_with("<std")
                && !library_file(&f.filename)
        })
    }
}

/// Whether `file`, as a backtrace names it, is one of locus's own sources or the standard
/// library's. A build with line tables only (`debug = "line-tables-only"`) names an
/// inlined frame by its bare fn name (`launch`, not `locus_runtime::…::launch`), so the
/// file is what tells.
fn library_file(file: &str) -> bool {
    let file = file.strip_prefix("./").unwrap_or(file);
    // This file's path as the compiler gave it, less its place in the crate: the crate's
    // `src/` (relative in locus's workspace, absolute for a dependency).
    let here = file!();
    let own = here.strip_suffix("backend/blocks/mod.rs").unwrap_or(here);
    file.starts_with(own) || file.starts_with("/rustc/")
}

#[derive(Default)]
struct Books {
    live: FastMap<u64, Block>,
    history: VecDeque<Event>,
    /// Whether anything was booked for this device (`read` lists only those).
    used: bool,
}

/// Every device's books, at its ordinal: a block is booked with one index, no lookup of
/// the device.
static BOOKS: OnceLock<Mutex<Vec<Books>>> = OnceLock::new();
static HISTORY_ON: OnceLock<AtomicBool> = OnceLock::new();

fn books() -> MutexGuard<'static, Vec<Books>> {
    BOOKS.get_or_init(Mutex::default).lock().unwrap_or_else(|p| p.into_inner())
}

/// The books of GPU `ordinal`, made on first use.
fn device_books(all: &mut Vec<Books>, ordinal: u32) -> &mut Books {
    let i = ordinal as usize;
    if all.len() <= i {
        all.resize_with(i + 1, Books::default);
    }
    let b = &mut all[i];
    b.used = true;
    b
}

/// The books of GPU `ordinal`, if anything was booked there.
fn booked_books(all: &mut [Books], ordinal: u32) -> Option<&mut Books> {
    all.get_mut(ordinal as usize).filter(|b| b.used)
}

fn history_flag() -> &'static AtomicBool {
    HISTORY_ON
        .get_or_init(|| AtomicBool::new(std::env::var("LOCUS_MEMORY_HISTORY").is_ok_and(|v| !v.is_empty() && v != "0")))
}

/// Whether allocation sites and the event history are recorded.
pub(crate) fn history_on() -> bool {
    history_flag().load(Ordering::Relaxed)
}

/// Turns the recording of allocation sites and events on or off (`LOCUS_MEMORY_HISTORY=1`
/// turns it on at start); off, the history recorded so far is dropped.
pub(crate) fn record_history(on: bool) {
    history_flag().store(on, Ordering::Relaxed);
    if !on {
        for b in books().iter_mut() {
            b.history.clear();
        }
    }
}

fn now_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

fn note(b: &mut Books, action: Action, addr: u64, size: usize, stream: u64, site: Option<Arc<Site>>) {
    if b.history.len() >= HISTORY {
        b.history.pop_front();
    }
    b.history.push_back(Event { action, addr, size, stream, time_us: now_us(), site });
}

/// The ordinal of `device` when its blocks are booked: those of GPUs (real or simulated),
/// not host memory.
fn booked(device: DeviceId) -> Option<u32> {
    match device {
        DeviceId::Cuda(n) => Some(n),
        _ => None,
    }
}

/// A block of `size` bytes at `addr` handed to a buffer of `requested` bytes on `stream`
/// (`fresh`: just asked of the driver or system, else reused from a cache).
pub(crate) fn alloc(device: DeviceId, addr: u64, size: usize, requested: usize, stream: u64, fresh: bool) {
    let Some(ordinal) = booked(device) else { return };
    let site = history_on().then(|| Arc::new(Site(Backtrace::force_capture())));
    let mut all = books();
    let b = device_books(&mut all, ordinal);
    if site.is_some() {
        if fresh {
            note(b, Action::SegmentAlloc, addr, size, stream, site.clone());
        }
        note(b, Action::Alloc, addr, size, stream, site.clone());
    }
    let block = Block { size, requested, stream, cached: false, site };
    // A block reused from a cache is in the books already: updated where it lies.
    match b.live.get_mut(&addr) {
        Some(known) => *known = block,
        None => {
            b.live.insert(addr, block);
        }
    }
}

/// The buffer at `addr` let go of its block; `cached`: kept for reuse, else given back.
pub(crate) fn free(device: DeviceId, addr: u64, cached: bool) {
    let Some(ordinal) = booked(device) else { return };
    let mut all = books();
    let Some(b) = booked_books(&mut all, ordinal) else { return };
    let record = history_on();
    let block = if cached {
        b.live.get_mut(&addr).and_then(|blk| {
            blk.cached = true;
            blk.requested = 0;
            // The history's entries need the block's details; without history, no copy.
            record.then(|| blk.clone())
        })
    } else {
        b.live.remove(&addr)
    };
    if let (true, Some(blk)) = (record, block) {
        note(b, Action::FreeRequested, addr, blk.size, blk.stream, blk.site.clone());
        note(b, Action::FreeCompleted, addr, blk.size, blk.stream, blk.site.clone());
        if !cached {
            note(b, Action::SegmentFree, addr, blk.size, blk.stream, None);
        }
    }
}

/// A cached block at `addr` went back to the driver.
pub(crate) fn release_cached(device: DeviceId, addr: u64) {
    let Some(ordinal) = booked(device) else { return };
    let mut all = books();
    let Some(b) = booked_books(&mut all, ordinal) else { return };
    if let Some(blk) = b.live.remove(&addr) {
        if history_on() {
            note(b, Action::SegmentFree, addr, blk.size, blk.stream, None);
        }
    }
}

/// What the books hold for one device.
#[derive(Clone, Debug, Default)]
pub(crate) struct DeviceBooks {
    pub blocks: Vec<(u64, Block)>,
    pub history: Vec<Event>,
}

/// A copy of every device's books, blocks by address.
pub(crate) fn read() -> Vec<(DeviceId, DeviceBooks)> {
    let all = books();
    all.iter()
        .enumerate()
        .filter(|(_, b)| b.used)
        .map(|(ordinal, b)| {
            let mut blocks: Vec<(u64, Block)> = b.live.iter().map(|(a, blk)| (*a, blk.clone())).collect();
            blocks.sort_by_key(|(a, _)| *a);
            (DeviceId::Cuda(ordinal as u32), DeviceBooks { blocks, history: b.history.iter().cloned().collect() })
        })
        .collect()
}

/// An out-of-memory error on `device` for `requested` bytes, with `free` bytes the
/// driver reports free, that says what is allocated, reserved and free and where the
/// memory went; with `LOCUS_OOM_SNAPSHOT=path` it also writes the snapshot there.
pub(crate) fn out_of_memory(device: DeviceId, requested: usize, free: usize) -> Error {
    let (mut allocated, mut reserved, mut largest_cached) = (0usize, 0usize, 0usize);
    let mut sites: HashMap<String, (usize, usize)> = HashMap::new();
    let mut biggest: Vec<(usize, u64)> = Vec::new();
    {
        let mut all = books();
        // Host memory is not booked: its report names the totals only.
        let mut unbooked = Books::default();
        let b = match booked(device) {
            Some(ordinal) => device_books(&mut all, ordinal),
            None => &mut unbooked,
        };
        if history_on() {
            // PyTorch's oom entry carries the driver's free bytes where others carry an address.
            note(b, Action::Oom, free as u64, requested, 0, None);
        }
        for blk in b.live.values() {
            reserved += blk.size;
            if blk.cached {
                largest_cached = largest_cached.max(blk.size);
                continue;
            }
            allocated += blk.requested;
            biggest.push((blk.requested, blk.stream));
            if let Some(f) = blk.site.as_ref().and_then(|s| s.caller()) {
                let e = sites.entry(format!("{} ({}:{})", f.name, f.filename, f.line)).or_default();
                e.0 += blk.requested;
                e.1 += 1;
            }
        }
    }
    let mib = |b: usize| format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64);
    let mut report = format!(
        "asked for {}; {} allocated by tensors, {} reserved by locus ({} cached for reuse, the largest cached \
         block {}), {} free on the device",
        mib(requested),
        mib(allocated),
        mib(reserved),
        mib(reserved - allocated.min(reserved)),
        mib(largest_cached),
        mib(free)
    );
    if sites.is_empty() {
        biggest.sort_unstable_by(|a, b| b.cmp(a));
        let list: Vec<String> = biggest.iter().take(5).map(|(s, st)| format!("{} on stream {st}", mib(*s))).collect();
        if !list.is_empty() {
            report += &format!("; the largest live tensors: {}", list.join(", "));
        }
        report += "; set LOCUS_MEMORY_HISTORY=1 to see where the memory was allocated";
    } else {
        let mut top: Vec<(String, (usize, usize))> = sites.into_iter().collect();
        top.sort_by_key(|b| std::cmp::Reverse(b.1 .0));
        let list: Vec<String> =
            top.iter().take(5).map(|(at, (bytes, n))| format!("{} in {n} tensors at {at}", mib(*bytes))).collect();
        report += &format!("; the top allocation sites: {}", list.join("; "));
    }
    if let Some(path) = std::env::var_os("LOCUS_OOM_SNAPSHOT").filter(|p| !p.is_empty()) {
        let path = std::path::PathBuf::from(path);
        report += &match pickle::write_snapshot(&path) {
            Ok(()) => format!("; snapshot written to {}", path.display()),
            Err(e) => format!("; the snapshot could not be written to {}: {e}", path.display()),
        };
    }
    if let Some(fault) = crate::faults::note() {
        report += &format!("; {fault}");
    }
    Error::OutOfMemory { device, requested, free, report }
}
