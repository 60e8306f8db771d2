//! Per-device memory accounts: bytes held, their high-water mark, and a capacity.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::device_id::DeviceId;
use crate::error::Result;

/// The bytes held on one device, with their high-water mark.
#[derive(Debug)]
pub(crate) struct MemoryAccount {
    pub device: DeviceId,
    capacity: usize,
    allocated: AtomicUsize,
    peak: AtomicUsize,
}

impl MemoryAccount {
    pub(crate) fn new(device: DeviceId, capacity: usize) -> Self {
        MemoryAccount { device, capacity, allocated: AtomicUsize::new(0), peak: AtomicUsize::new(0) }
    }

    pub(crate) fn reserve(&self, bytes: usize) -> Result<()> {
        let oom =
            |held: usize| crate::backend::blocks::out_of_memory(self.device, bytes, self.capacity.saturating_sub(held));
        let mut held = self.allocated.load(Ordering::Relaxed);
        loop {
            let next = held.checked_add(bytes).filter(|&n| n <= self.capacity).ok_or_else(|| oom(held))?;
            match self.allocated.compare_exchange_weak(held, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    // A load first: the peak rises rarely, and a read costs no write.
                    if self.peak.load(Ordering::Relaxed) < next {
                        self.peak.fetch_max(next, Ordering::Relaxed);
                    }
                    return Ok(());
                }
                Err(now) => held = now,
            }
        }
    }

    pub(crate) fn release(&self, bytes: usize) {
        self.allocated.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Bytes held now.
    pub(crate) fn allocated(&self) -> usize {
        self.allocated.load(Ordering::Relaxed)
    }

    /// The most bytes held since the last [`MemoryAccount::reset_peak`].
    pub(crate) fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// Starts the high-water mark again from what is held now.
    pub(crate) fn reset_peak(&self) {
        self.peak.store(self.allocated(), Ordering::Relaxed);
    }
}
