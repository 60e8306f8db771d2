//! The caching pinned-host allocator: page-locked memory in power-of-two bins, reused
//! only after every copy that used a block has completed.
//!
//! On the cuda backend blocks come from `cuMemHostAlloc` (portable, not
//! write-combined: the host reads them fast too); on the host backend from the ordinary
//! allocator, with the same bins, counters and reuse rules.
//!
//! The rule that keeps the host from racing a DMA lives here, not in any `Drop` of a
//! user-facing type: every copy that reads or writes a block records its event on the
//! block ([`PinnedBlock::hold_until`]); the pool hands a block out again only once those
//! events have completed, and a host write to a live block first waits for them
//! ([`PinnedBlock::wait_unused`]). A block whose copy could not be proven complete (a
//! failed event record and a failed stream sync) is retired: never reused nor freed.
//! New blocks are zeroed once, so the pool's memory is always initialised.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::backend;
use crate::backend::api::fence::Fence;
use crate::backend::sync::hazard::{self, Region, Track};
use crate::device_id::DeviceId;
use crate::error::Result;

/// The smallest block: a page.
const MIN_BLOCK: usize = 4096;

/// Counters of the pinned pool.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{pinned_stats, Cpu, Tensor};
/// let before = pinned_stats();
/// let p = Tensor::<Cpu>::ones([1000])?.pin_memory()?;
/// assert!(pinned_stats().bytes_in_use >= before.bytes_in_use + 4000);
/// drop(p);
/// # Ok::<(), locus::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PinnedStats {
    /// Blocks the pool asked the driver for (`cuMemHostAlloc` calls).
    pub host_allocs: u64,
    /// Requests served from a cached block.
    pub cache_hits: u64,
    /// Bytes of page-locked memory the pool holds, in use or cached.
    pub bytes_held: usize,
    /// Bytes in blocks handed out and not yet returned.
    pub bytes_in_use: usize,
}

struct Cached {
    ptr: usize,
    /// Copies that used the block; it is reused once they have all completed.
    events: Vec<Arc<dyn Fence>>,
    life: Arc<Life>,
}

/// What a block carries from one use to the next: the hazard checker's track, and how
/// many queued host-backend jobs still hold its address (the pool never frees such a
/// block, whatever its events say, so a simulated DMA cannot touch freed memory).
#[derive(Debug, Default)]
struct Life {
    track: Track,
    in_flight: AtomicUsize,
}

/// A queued job's claim on a block's memory: while it lives the pool does not free the
/// block (it may still hand it out; that is the race the checker reports).
#[derive(Debug)]
pub(crate) struct InFlight(Arc<Life>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Default)]
struct Pool {
    bins: Mutex<BTreeMap<usize, Vec<Cached>>>,
    host_allocs: AtomicU64,
    cache_hits: AtomicU64,
    bytes_held: AtomicUsize,
    bytes_in_use: AtomicUsize,
}

static POOL: std::sync::LazyLock<Pool> = std::sync::LazyLock::new(Pool::default);

/// A block of page-locked memory, returned to the pool on drop.
#[derive(Debug)]
pub(crate) struct PinnedBlock {
    ptr: usize,
    cap: usize,
    events: Mutex<Vec<Arc<dyn Fence>>>,
    /// Set when a copy's end could not be observed: the block is never reused.
    retired: AtomicBool,
    life: Arc<Life>,
}

impl PinnedBlock {
    fn new(ptr: usize, cap: usize, life: Arc<Life>) -> Self {
        PinnedBlock { ptr, cap, events: Mutex::new(Vec::new()), retired: AtomicBool::new(false), life }
    }

    /// The hazard checker's record of this block's uses, kept across reuses.
    pub(crate) fn track(&self) -> &Track {
        &self.life.track
    }

    /// A claim that keeps the block's memory allocated for a queued job.
    pub(crate) fn in_flight(&self) -> InFlight {
        self.life.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(Arc::clone(&self.life))
    }

    /// The start of the block (dangling but aligned when the block is empty).
    pub(crate) fn ptr(&self) -> *mut u8 {
        if self.cap == 0 {
            std::ptr::NonNull::<u64>::dangling().as_ptr() as *mut u8
        } else {
            self.ptr as *mut u8
        }
    }

    /// Keeps the block from reuse until `event` has completed.
    pub(crate) fn hold_until(&self, event: Arc<dyn Fence>) {
        let mut ev = self.events.lock().unwrap_or_else(|p| p.into_inner());
        // Drop events that already completed, so a long-lived block does not pile them up.
        if ev.len() >= 8 {
            ev.retain(|e| !e.is_done());
        }
        ev.push(event);
    }

    /// Waits on the host until no copy uses the block any more: call before the host
    /// writes to it. An error leaves the events in place (the block stays unwritable).
    pub(crate) fn wait_unused(&self) -> Result<()> {
        let mut ev = self.events.lock().unwrap_or_else(|p| p.into_inner());
        if ev.is_empty() {
            return Ok(());
        }
        while let Some(e) = ev.last() {
            e.wait()?;
            ev.pop();
        }
        Ok(())
    }

    /// Keeps the block from the host and from reuse for the rest of the process: for a
    /// copy that was queued but whose end cannot be observed.
    pub(crate) fn retire(&self) {
        self.retired.store(true, Ordering::Relaxed);
    }
}

impl Drop for PinnedBlock {
    fn drop(&mut self) {
        if self.cap == 0 {
            return;
        }
        let events = std::mem::take(self.events.get_mut().unwrap_or_else(|p| p.into_inner()));
        POOL.bytes_in_use.fetch_sub(self.cap, Ordering::Relaxed);
        if *self.retired.get_mut() {
            // Leaked on purpose: a DMA may still use it. It stays counted as held.
            return;
        }
        let mut bins = POOL.bins.lock().unwrap_or_else(|p| p.into_inner());
        bins.entry(self.cap).or_default().push(Cached { ptr: self.ptr, events, life: Arc::clone(&self.life) });
    }
}

fn all_done(events: &[Arc<dyn Fence>]) -> bool {
    events.iter().all(|e| e.is_done())
}

/// A block of at least `bytes` bytes: a completed cached one of its bin, else new.
pub(crate) fn acquire(bytes: usize) -> Result<PinnedBlock> {
    if bytes == 0 {
        return Ok(PinnedBlock::new(0, 0, Arc::default()));
    }
    let cap = bytes.max(MIN_BLOCK).checked_next_power_of_two().unwrap_or(bytes);
    let reused = {
        let mut bins = POOL.bins.lock().unwrap_or_else(|p| p.into_inner());
        bins.get_mut(&cap).and_then(|bin| bin.iter().position(|c| all_done(&c.events)).map(|i| bin.swap_remove(i)))
    };
    let (ptr, life) = match reused {
        Some(c) => {
            POOL.cache_hits.fetch_add(1, Ordering::Relaxed);
            if hazard::enabled() {
                hazard::reused(Region { track: &c.life.track, device: DeviceId::Pinned, bytes: cap, dtype: None });
            }
            (c.ptr, c.life)
        }
        None => {
            let b = backend::selected()?;
            let ptr = match b.alloc_pinned(cap) {
                Ok(p) => p,
                // Out of page-locked memory: give back what the cache holds, then retry once.
                Err(_) => {
                    release_cached();
                    b.alloc_pinned(cap)?
                }
            };
            // SAFETY: the backend just allocated `cap` bytes at `ptr` for the pool alone.
            // Zeroing them once makes every block initialised memory for its lifetime.
            unsafe { std::ptr::write_bytes(ptr as *mut u8, 0, cap) };
            POOL.host_allocs.fetch_add(1, Ordering::Relaxed);
            POOL.bytes_held.fetch_add(cap, Ordering::Relaxed);
            (ptr, Arc::default())
        }
    };
    POOL.bytes_in_use.fetch_add(cap, Ordering::Relaxed);
    Ok(PinnedBlock::new(ptr, cap, life))
}

/// The pool's counters.
pub fn pinned_stats() -> PinnedStats {
    PinnedStats {
        host_allocs: POOL.host_allocs.load(Ordering::Relaxed),
        cache_hits: POOL.cache_hits.load(Ordering::Relaxed),
        bytes_held: POOL.bytes_held.load(Ordering::Relaxed),
        bytes_in_use: POOL.bytes_in_use.load(Ordering::Relaxed),
    }
}

/// Frees the cached blocks whose copies have completed (`torch.cuda.empty_cache` for
/// pinned memory) and returns how many bytes went back to the system.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{release_cached_pinned, pinned_stats, Cpu, Tensor};
/// drop(Tensor::<Cpu>::ones([1 << 16])?.pin_memory()?);
/// release_cached_pinned();
/// assert_eq!(pinned_stats().bytes_held, pinned_stats().bytes_in_use);
/// # Ok::<(), locus::Error>(())
/// ```
pub fn release_cached_pinned() -> usize {
    release_cached()
}

fn release_cached() -> usize {
    let Ok(b) = backend::selected() else { return 0 };
    let mut freed = 0;
    let mut bins = POOL.bins.lock().unwrap_or_else(|p| p.into_inner());
    for (&cap, bin) in bins.iter_mut() {
        bin.retain(|c| {
            if !all_done(&c.events) || c.life.in_flight.load(Ordering::Acquire) > 0 {
                return true;
            }
            // SAFETY: the block came from this backend's alloc_pinned with this size, and
            // no copy still uses it.
            unsafe { b.free_pinned(c.ptr, cap) };
            freed += cap;
            false
        });
    }
    POOL.bytes_held.fetch_sub(freed, Ordering::Relaxed);
    freed
}
