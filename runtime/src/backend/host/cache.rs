//! The caching allocator of pageable host memory: freed blocks of 4 KiB and more wait in
//! size-binned lists and are handed out again, so that a new host buffer of a size the
//! process used before is memory already mapped and touched, with no page fault per
//! 4 KiB (and no zeroing by the kernel) on the hot path.
//!
//! A block comes back only when its last holder lets go (the buffer and every queued job
//! that uses it; see `host/buffer.rs`), so a reused block is never in use. Its bytes are
//! what the last user left: every buffer drawn from here is written in full before it is
//! read. New blocks are zeroed (fresh pages, or huge-page mappings from `huge_pages`).
//!
//! The cache is bounded: `LOCUS_HOST_CACHE` bytes (default [`DEFAULT_CAP`], `0` turns it
//! off). A block that would push it over evicts the oldest cached blocks; a block larger
//! than the cap is freed. [`release_cached_host`] frees everything cached, and a fresh
//! allocation that fails does so and tries once more. [`host_stats`] reports the counts.

use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{LazyLock, Mutex};

use crate::backend::host::huge_pages::{Mapping, HUGE_PAGE};

/// The smallest block cached: a page. Smaller buffers come from the global allocator,
/// whose own free lists serve them without page faults.
pub(crate) const MIN_CACHED: usize = 4096;

/// The cap when `LOCUS_HOST_CACHE` is not set: 2 GiB.
pub(crate) const DEFAULT_CAP: usize = 2 << 30;

/// Counters of the host-memory cache.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{host_stats, Cpu, Tensor};
/// drop(Tensor::<Cpu>::ones([1 << 16])?); // 256 KiB back into the cache
/// let before = host_stats();
/// let again = Tensor::<Cpu>::ones([1 << 16])?; // the same size class: reused
/// assert!(host_stats().cache_hits > before.cache_hits || host_stats().cap == 0);
/// assert!(host_stats().bytes_cached <= host_stats().cap);
/// # drop(again);
/// # Ok::<(), locus::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HostStats {
    /// Blocks asked of the system (each a fresh mapping or heap allocation).
    pub host_allocs: u64,
    /// Requests served from a cached block.
    pub cache_hits: u64,
    /// Bytes in cached blocks, free for reuse.
    pub bytes_cached: usize,
    /// Bytes in blocks handed out and not yet returned.
    pub bytes_in_use: usize,
    /// The most bytes the cache keeps (`LOCUS_HOST_CACHE`).
    pub cap: usize,
}

/// The memory of a block.
#[derive(Debug)]
enum Mem {
    /// From the global allocator, as `class / 8` words.
    Heap(Vec<u64>),
    /// Large blocks, on huge pages where the system has them.
    Mapped(Mapping),
}

impl Mem {
    fn ptr(&mut self) -> *mut u8 {
        match self {
            Mem::Heap(w) => w.as_mut_ptr() as *mut u8,
            Mem::Mapped(m) => m.as_ptr(),
        }
    }
}

/// `n` zeroed words, or `None` when the allocator refuses. Zeroed allocation lets the OS
/// hand out untouched zero pages, so memory is written once, by whoever fills it.
fn zeroed_words(n: usize) -> Option<Vec<u64>> {
    if n == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<u64>(n).ok()?;
    // SAFETY: the layout is non-zero-sized; a non-null result is an allocation of `n`
    // zeroed u64s with u64 alignment from the global allocator, which is what a
    // Vec<u64> of capacity `n` owns.
    unsafe {
        let p = std::alloc::alloc_zeroed(layout) as *mut u64;
        (!p.is_null()).then(|| Vec::from_raw_parts(p, n, n))
    }
}

/// The size class of a request: four classes per doubling (at most a quarter wasted),
/// whole pages, and whole huge pages from [`HUGE_PAGE`] up. `None` below [`MIN_CACHED`]
/// or where the class would overflow: such buffers are not cached.
pub(crate) fn class_of(bytes: usize) -> Option<usize> {
    if bytes < MIN_CACHED {
        return None;
    }
    let step = (bytes.checked_next_power_of_two()? / 8).max(MIN_CACHED);
    let step = if bytes > HUGE_PAGE { step.max(HUGE_PAGE) } else { step };
    bytes.checked_next_multiple_of(step)
}

/// Host memory of at least the requested size, 8-byte aligned; back to its cache on drop.
#[derive(Debug)]
pub(crate) struct HostBlock {
    ptr: NonNull<u8>,
    /// The size class, or `None` for a block that is freed on drop.
    class: Option<usize>,
    /// `None` only for an empty block.
    mem: Option<Mem>,
    cache: &'static HostCache,
}

// SAFETY: the block owns its memory as a Vec<u8> would; the pointer is into that memory.
unsafe impl Send for HostBlock {}
// SAFETY: `&HostBlock` hands out the address only; writes through it need `unsafe` and
// the owner's exclusive access (as in `HostBuffer::bytes_mut`).
unsafe impl Sync for HostBlock {}

impl HostBlock {
    /// The first byte (dangling but aligned for an empty block).
    pub(crate) fn ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for HostBlock {
    fn drop(&mut self) {
        if let (Some(class), Some(mem)) = (self.class, self.mem.take()) {
            self.cache.put(class, mem);
        }
    }
}

#[derive(Debug, Default)]
struct Bins {
    /// Cached blocks by size class, each with the time it came back.
    by_class: BTreeMap<usize, Vec<(u64, Mem)>>,
    /// Counts returns: the age of a cached block.
    clock: u64,
}

/// A size-binned cache of host memory with a cap (the process has one, [`CACHE`]; tests
/// make their own).
#[derive(Debug)]
pub(crate) struct HostCache {
    bins: Mutex<Bins>,
    cap: usize,
    host_allocs: AtomicU64,
    cache_hits: AtomicU64,
    bytes_cached: AtomicUsize,
    bytes_in_use: AtomicUsize,
}

/// `LOCUS_HOST_CACHE` as a byte count: `Ok(None)` when unset, an error naming the variable
/// when it is not one (the host backend reports it; the cache then uses the default).
pub(crate) fn cap_var() -> std::result::Result<Option<usize>, String> {
    parse_cap(std::env::var("LOCUS_HOST_CACHE").ok().as_deref())
}

/// [`cap_var`] of a value (`None`: unset); any `usize` is a cap.
pub(in crate::backend::host) fn parse_cap(v: Option<&str>) -> std::result::Result<Option<usize>, String> {
    v.map(|v| v.trim().parse().map_err(|_| format!("LOCUS_HOST_CACHE=`{v}` is not a number of bytes"))).transpose()
}

/// The process's cache of host memory.
pub(crate) static CACHE: LazyLock<HostCache> =
    LazyLock::new(|| HostCache::new(cap_var().ok().flatten().unwrap_or(DEFAULT_CAP)));

impl HostCache {
    pub(crate) fn new(cap: usize) -> Self {
        HostCache {
            bins: Mutex::new(Bins::default()),
            cap,
            host_allocs: AtomicU64::new(0),
            cache_hits: AtomicU64::new(0),
            bytes_cached: AtomicUsize::new(0),
            bytes_in_use: AtomicUsize::new(0),
        }
    }

    fn bins(&self) -> std::sync::MutexGuard<'_, Bins> {
        self.bins.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A block of at least `bytes` bytes: a cached one of its class, else a new zeroed
    /// one; `None` when the system has no memory for it (after freeing the cache).
    pub(crate) fn acquire(&'static self, bytes: usize) -> Option<HostBlock> {
        if bytes == 0 {
            let ptr = NonNull::<u64>::dangling().cast();
            return Some(HostBlock { ptr, class: None, mem: None, cache: self });
        }
        let class = class_of(bytes).filter(|&c| c <= self.cap);
        let cached = class.and_then(|c| {
            let mut bins = self.bins();
            let (_, mem) = bins.by_class.get_mut(&c)?.pop()?;
            self.bytes_cached.fetch_sub(c, Ordering::Relaxed);
            Some(mem)
        });
        let mut mem = match cached {
            Some(mem) => {
                self.cache_hits.fetch_add(1, Ordering::Relaxed);
                mem
            }
            None => {
                let size = class.unwrap_or(bytes);
                let fresh =
                    || Mapping::zeroed(size).map(Mem::Mapped).or_else(|| zeroed_words(size.div_ceil(8)).map(Mem::Heap));
                let mem = fresh().or_else(|| {
                    // Out of memory: give back what the cache holds, then retry once.
                    self.release();
                    fresh()
                })?;
                self.host_allocs.fetch_add(1, Ordering::Relaxed);
                mem
            }
        };
        if let Some(c) = class {
            self.bytes_in_use.fetch_add(c, Ordering::Relaxed);
        }
        let ptr = NonNull::new(mem.ptr())?;
        Some(HostBlock { ptr, class, mem: Some(mem), cache: self })
    }

    /// Takes back a block of `class` bytes: cached, after evicting the oldest blocks that
    /// would push the cache over its cap, or freed when it is larger than the cap.
    fn put(&self, class: usize, mem: Mem) {
        self.bytes_in_use.fetch_sub(class, Ordering::Relaxed);
        if class > self.cap {
            return;
        }
        let mut evicted = Vec::new();
        {
            let mut bins = self.bins();
            while self.bytes_cached.load(Ordering::Relaxed) + class > self.cap {
                let oldest = bins.by_class.iter().filter_map(|(&c, list)| list.first().map(|(age, _)| (*age, c))).min();
                let Some((_, c)) = oldest else { break };
                if let Some(list) = bins.by_class.get_mut(&c) {
                    evicted.push(list.remove(0).1);
                    self.bytes_cached.fetch_sub(c, Ordering::Relaxed);
                }
            }
            bins.clock += 1;
            let age = bins.clock;
            bins.by_class.entry(class).or_default().push((age, mem));
            self.bytes_cached.fetch_add(class, Ordering::Relaxed);
        }
        drop(evicted); // freed outside the lock
    }

    /// Frees every cached block and returns how many bytes went back to the system.
    pub(crate) fn release(&self) -> usize {
        let taken = std::mem::take(&mut self.bins().by_class);
        let freed: usize = taken.iter().map(|(&c, list)| c * list.len()).sum();
        self.bytes_cached.fetch_sub(freed, Ordering::Relaxed);
        freed
    }

    pub(crate) fn stats(&self) -> HostStats {
        HostStats {
            host_allocs: self.host_allocs.load(Ordering::Relaxed),
            cache_hits: self.cache_hits.load(Ordering::Relaxed),
            bytes_cached: self.bytes_cached.load(Ordering::Relaxed),
            bytes_in_use: self.bytes_in_use.load(Ordering::Relaxed),
            cap: self.cap,
        }
    }
}

/// The host-memory cache's counters: what it asked of the system, what it served again,
/// what it holds.
pub fn host_stats() -> HostStats {
    CACHE.stats()
}

/// Frees the cached host memory (what freed host buffers left for reuse; buffers in use
/// are not touched) and returns how many bytes went back to the system.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{host_stats, release_cached_host, Cpu, Tensor};
/// drop(Tensor::<Cpu>::ones([1 << 16])?);
/// release_cached_host();
/// assert_eq!(host_stats().bytes_cached, 0);
/// # Ok::<(), locus::Error>(())
/// ```
pub fn release_cached_host() -> usize {
    CACHE.release()
}

#[cfg(test)]
mod tests {
    use crate::backend::host::cache::*;

    fn cache(cap: usize) -> &'static HostCache {
        Box::leak(Box::new(HostCache::new(cap)))
    }

    #[test]
    fn classes_waste_at_most_a_quarter_and_small_sizes_are_not_cached() {
        assert_eq!(class_of(0), None);
        assert_eq!(class_of(MIN_CACHED - 1), None);
        assert_eq!(class_of(usize::MAX), None);
        for bytes in (MIN_CACHED..1 << 27).step_by(40_961).chain([4096, 4097, HUGE_PAGE, HUGE_PAGE + 1, 64 << 20]) {
            let c = class_of(bytes).expect("a class");
            assert!(
                c >= bytes && c - bytes <= bytes / 4 + MIN_CACHED.max(if bytes > HUGE_PAGE { HUGE_PAGE } else { 0 })
            );
            assert_eq!(c % MIN_CACHED, 0);
            if bytes > HUGE_PAGE {
                assert_eq!(c % HUGE_PAGE, 0, "{bytes}");
            }
            assert_eq!(class_of(c), Some(c), "a class is its own class");
        }
    }

    #[test]
    fn a_freed_block_is_handed_out_again_for_its_class() {
        let cache = cache(1 << 30);
        let a = cache.acquire(100_000).expect("memory");
        let p = a.ptr();
        // SAFETY: the block holds at least 100_000 bytes and this test owns it.
        unsafe { std::ptr::write_bytes(p, 7, 100_000) };
        drop(a);
        let s = cache.stats();
        assert_eq!((s.host_allocs, s.cache_hits, s.bytes_in_use), (1, 0, 0));
        assert_eq!(s.bytes_cached, class_of(100_000).unwrap());
        let b = cache.acquire(99_000).expect("memory"); // the same class
        assert_eq!(b.ptr(), p, "the cached block comes back");
        // SAFETY: as above; the reused block keeps the bytes its last user left.
        assert_eq!(unsafe { *p.add(5) }, 7);
        let s = cache.stats();
        assert_eq!((s.host_allocs, s.cache_hits, s.bytes_cached), (1, 1, 0));
        assert_eq!(s.bytes_in_use, class_of(99_000).unwrap());
        let c = cache.acquire(300_000).expect("memory"); // another class: fresh and zeroed
                                                         // SAFETY: the block holds at least 300_000 bytes.
        assert!(unsafe { std::slice::from_raw_parts(c.ptr(), 300_000) }.iter().all(|&b| b == 0));
        assert_eq!(cache.stats().host_allocs, 2);
        let empty = cache.acquire(0).expect("an empty block");
        assert_eq!(empty.ptr() as usize % 8, 0);
        let small = cache.acquire(100).expect("memory");
        drop((b, c, empty, small));
        let s = cache.stats();
        assert_eq!(s.bytes_in_use, 0);
        assert_eq!(
            s.bytes_cached,
            class_of(99_000).unwrap() + class_of(300_000).unwrap(),
            "small blocks are not cached"
        );
    }

    #[test]
    fn the_cache_stays_under_its_cap_and_evicts_the_oldest() {
        let class = class_of(64 << 10).unwrap();
        let cache = cache(3 * class);
        let blocks: Vec<HostBlock> = (0..5).map(|_| cache.acquire(64 << 10).expect("memory")).collect();
        let ptrs: Vec<*mut u8> = blocks.iter().map(HostBlock::ptr).collect();
        drop(blocks); // returned in order: the first two are evicted
        let s = cache.stats();
        assert_eq!(s.bytes_cached, 3 * class);
        assert!(s.bytes_cached <= s.cap);
        let again: Vec<HostBlock> = (0..3).map(|_| cache.acquire(64 << 10).expect("memory")).collect();
        let mut reused: Vec<*mut u8> = again.iter().map(HostBlock::ptr).collect();
        reused.sort();
        let mut newest = ptrs[2..].to_vec();
        newest.sort();
        assert_eq!(reused, newest, "the newest three were kept");
        // A block larger than the cap is never cached.
        drop(cache.acquire(4 * class).expect("memory"));
        assert_eq!(cache.stats().bytes_cached, 0);
        assert_eq!(cache.stats().host_allocs, 6);
        // A cap of 0 turns the cache off.
        let off = crate::backend::host::cache::tests::cache(0);
        drop(off.acquire(1 << 20).expect("memory"));
        drop(off.acquire(1 << 20).expect("memory"));
        assert_eq!((off.stats().cache_hits, off.stats().bytes_cached, off.stats().host_allocs), (0, 0, 2));
        drop(again);
    }

    #[test]
    fn release_frees_the_cached_blocks_and_leaves_those_in_use() {
        let cache = cache(1 << 30);
        let kept = cache.acquire(1 << 20).expect("memory");
        drop(cache.acquire(1 << 16).expect("memory"));
        drop(cache.acquire(3 << 20).expect("memory"));
        let cached = cache.stats().bytes_cached;
        assert_eq!(cached, class_of(1 << 16).unwrap() + class_of(3 << 20).unwrap());
        assert_eq!(cache.release(), cached);
        let s = cache.stats();
        assert_eq!((s.bytes_cached, s.bytes_in_use), (0, class_of(1 << 20).unwrap()));
        drop(cache.acquire(1 << 16).expect("memory"));
        assert_eq!(cache.stats().host_allocs, 4, "released blocks are not reused");
        drop(kept);
        assert_eq!(cache.stats().bytes_in_use, 0);
    }
}
