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
//! A block is booked under its device's lock when it is made and when it goes back for
//! good. Between the two, each buffer that gets it from its stream's cache and gives it
//! back writes only the block's cell of bytes asked for ([`Asked`]), which the books read;
//! with history on each of those steps is also an event, under the lock.

mod asked;
mod oom;
pub(crate) mod pickle;

pub(crate) use asked::Asked;
pub(crate) use oom::out_of_memory;

use std::backtrace::Backtrace;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::backend::fast_map::FastMap;
use crate::device_id::DeviceId;

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

/// A live block, as a snapshot reads it.
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

/// A live block as the books hold it: the bytes its buffer asked for (0 while cached) in
/// a cell the buffer shares ([`Asked`]).
struct Entry {
    size: usize,
    stream: u64,
    site: Option<Arc<Site>>,
    asked: Asked,
}

impl Entry {
    fn block(&self) -> Block {
        let requested = self.asked.get();
        Block { size: self.size, requested, stream: self.stream, cached: requested == 0, site: self.site.clone() }
    }
}

#[derive(Default)]
struct Books {
    live: FastMap<u64, Entry>,
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
/// (`fresh`: just asked of the driver or system, else reused from a cache). The cell of
/// the bytes asked for, which the buffer keeps: a block reused from a cache keeps its
/// cell, so its buffer can give it back to the cache and take it again without the books'
/// lock ([`Asked`]). Memory that is not booked (the host's) gets none.
pub(crate) fn alloc(
    device: DeviceId,
    addr: u64,
    size: usize,
    requested: usize,
    stream: u64,
    fresh: bool,
) -> Option<Asked> {
    let ordinal = booked(device)?;
    let site = history_on().then(|| Arc::new(Site(Backtrace::force_capture())));
    let mut all = books();
    let b = device_books(&mut all, ordinal);
    if site.is_some() {
        if fresh {
            note(b, Action::SegmentAlloc, addr, size, stream, site.clone());
        }
        note(b, Action::Alloc, addr, size, stream, site.clone());
    }
    // A block reused from a cache is in the books already: updated where it lies.
    match b.live.get_mut(&addr) {
        Some(known) => {
            known.asked.set(requested);
            (known.size, known.stream, known.site) = (size, stream, site);
            Some(known.asked.clone())
        }
        None => {
            let asked = Asked::new(requested);
            b.live.insert(addr, Entry { size, stream, site, asked: asked.clone() });
            Some(asked)
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
            blk.asked.set(0);
            // The history's entries need the block's details; without history, no copy.
            record.then(|| blk.block())
        })
    } else {
        b.live.remove(&addr).map(|e| e.block())
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
            let mut blocks: Vec<(u64, Block)> = b.live.iter().map(|(a, blk)| (*a, blk.block())).collect();
            blocks.sort_by_key(|(a, _)| *a);
            (DeviceId::Cuda(ordinal as u32), DeviceBooks { blocks, history: b.history.iter().cloned().collect() })
        })
        .collect()
}
