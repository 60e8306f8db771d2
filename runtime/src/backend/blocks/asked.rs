//! The bytes a booked block's buffer asked for, in a cell the books and the buffer share.
//!
//! A small block goes back to its stream's cache when its buffer is dropped and comes
//! out again for the next buffer of its size class, once per eager op in a loop. With no
//! history kept, the books learn of that through the cell alone (a plain store, no lock):
//! the block is cached while the cell holds 0, and otherwise in use for that many bytes.
//! With history on, each step is also an event, written under the books' lock.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::{alloc, free, history_on};
use crate::device_id::DeviceId;

/// The bytes a buffer asked for its block (0: the block is cached): the buffer's own count
/// of its bytes, which the books read for snapshots and out-of-memory reports.
#[derive(Clone, Debug)]
pub(crate) struct Asked(Arc<AtomicUsize>);

impl Asked {
    pub(crate) fn new(bytes: usize) -> Self {
        Asked(Arc::new(AtomicUsize::new(bytes)))
    }

    #[inline]
    pub(crate) fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    pub(super) fn set(&self, bytes: usize) {
        self.0.store(bytes, Ordering::Relaxed);
    }

    /// The block at `addr` of `device` goes back to its stream's cache.
    pub(crate) fn cached(&self, device: DeviceId, addr: u64) {
        if history_on() {
            free(device, addr, true);
        }
        self.set(0);
    }

    /// The cached block at `addr` (`size` bytes, of stream `stream`) is handed to a buffer
    /// of `bytes` bytes, `bytes > 0`.
    pub(crate) fn reused(&self, device: DeviceId, addr: u64, size: usize, bytes: usize, stream: u64) {
        if history_on() {
            // The block is in the books already, with this cell.
            drop(alloc(device, addr, size, bytes, stream, false));
        }
        self.set(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{alloc, free, read};
    use crate::device_id::DeviceId;

    /// A block given back to a cache and taken again through its cell (an eager op's
    /// output in a loop) is what the books say: cached, then in use for the new bytes.
    #[test]
    fn a_block_cached_and_reused_through_its_cell_is_booked_so() {
        let (dev, addr) = (DeviceId::Cuda(0), 0x7e57_0000_0000_u64);
        let find = || {
            let books = read().into_iter().find(|(d, _)| *d == dev)?.1;
            books.blocks.into_iter().find(|(a, _)| *a == addr).map(|(_, b)| (b.requested, b.cached))
        };
        let asked = alloc(dev, addr, 1024, 1000, 5, true).expect("a GPU's block is booked");
        assert_eq!(find(), Some((1000, false)));
        asked.cached(dev, addr);
        assert_eq!((find(), asked.get()), (Some((0, true)), 0));
        asked.reused(dev, addr, 1024, 700, 5);
        assert_eq!((find(), asked.get()), (Some((700, false)), 700));
        free(dev, addr, false);
        assert_eq!(find(), None);
    }
}
