//! Host memory of the host backend's devices and of the `cpu` and `pinned` placements:
//! pageable heap or huge-page mappings, or blocks of the pinned pool, with the stream
//! that wrote them and the streams that have read them.

use std::sync::Mutex;

use super::streams::{current_stream, order_of};
use crate::backend::account::MemoryAccount;
use crate::backend::huge_pages::Mapping;
use crate::backend::pinned_pool::{self as pinned, PinnedBlock};
use crate::backend::RawEvent;
use crate::device::DeviceId;
use crate::element::Element;
use crate::error::{Error, Result};

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

/// Host memory of one device, 8-byte aligned so that any element type can view it.
/// `pinned` memory comes from the pinned pool, large buffers from their own mapping on
/// huge pages, the rest from the ordinary allocator.
#[derive(Debug)]
pub(crate) struct HostBuffer {
    mem: Mem,
    len: usize,
    pub(super) account: &'static MemoryAccount,
    /// The simulated stream that wrote this memory.
    pub(super) stream: u64,
    /// The number of that write on its stream.
    pub(super) written: u64,
    /// Other streams that already waited for this memory.
    pub(super) readers: Mutex<Vec<u64>>,
}

#[derive(Debug)]
enum Mem {
    Heap(Vec<u64>),
    /// Large buffers, on huge pages where the system has them.
    Mapped(Mapping),
    Pinned(PinnedBlock),
}

impl HostBuffer {
    /// `len` bytes on `account`'s device: zeroed pageable memory, or a pinned block whose
    /// bytes are initialised but unspecified (a reused block keeps its old contents).
    pub(super) fn alloc(account: &'static MemoryAccount, len: usize) -> Result<Self> {
        account.reserve(len)?;
        let mem = if account.device == DeviceId::Pinned {
            pinned::acquire(len).map(Mem::Pinned)
        } else if let Some(m) = Mapping::zeroed(len) {
            Ok(Mem::Mapped(m))
        } else {
            zeroed_words(len.div_ceil(8)).map(Mem::Heap).ok_or(Error::OutOfMemory {
                device: account.device,
                requested: len,
                free: 0,
            })
        };
        match mem {
            Ok(mem) => {
                let stream = current_stream(account.device);
                let written = order_of(account.device, stream).mark_write();
                Ok(HostBuffer { mem, len, account, stream, written, readers: Mutex::new(Vec::new()) })
            }
            Err(e) => {
                account.release(len);
                Err(e)
            }
        }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        let start = match &self.mem {
            Mem::Heap(w) => return &bytemuck::cast_slice(w)[..self.len],
            Mem::Mapped(m) => m.as_ptr(),
            Mem::Pinned(b) => b.ptr(),
        };
        // SAFETY: the mapping or block holds at least `len` bytes and this buffer owns it.
        unsafe { std::slice::from_raw_parts(start, self.len) }
    }

    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        let start = match &mut self.mem {
            Mem::Heap(w) => return &mut bytemuck::cast_slice_mut(w)[..self.len],
            Mem::Mapped(m) => m.as_ptr(),
            Mem::Pinned(b) => b.ptr(),
        };
        // SAFETY: as in `bytes`, and `&mut self` makes the access unique.
        unsafe { std::slice::from_raw_parts_mut(start, self.len) }
    }

    pub(crate) fn as_slice<T: Element>(&self) -> &[T] {
        bytemuck::cast_slice(self.bytes())
    }

    pub(crate) fn as_mut_slice<T: Element>(&mut self) -> &mut [T] {
        bytemuck::cast_slice_mut(self.bytes_mut())
    }

    /// Whether this is page-locked memory from the pinned pool.
    pub(crate) fn is_pinned(&self) -> bool {
        matches!(self.mem, Mem::Pinned(_))
    }

    /// Keeps pinned memory from reuse by the pool, and from host writes through
    /// [`HostBuffer::writable`], until `event` has completed.
    pub(crate) fn hold_until(&self, event: RawEvent) {
        if let Mem::Pinned(b) = &self.mem {
            b.hold_until(event);
        }
    }

    /// Retires pinned memory that a copy may still use but whose end cannot be observed:
    /// it is never written by the host nor reused again.
    pub(crate) fn retire(&self) {
        if let Mem::Pinned(b) = &self.mem {
            b.retire();
        }
    }

    /// The bytes, for the host to write in place, once every copy that still uses this
    /// memory has completed (pageable memory has none). The only way to write a buffer
    /// that tensors have shared: freshly allocated buffers may use `bytes_mut`.
    pub(crate) fn writable<T: Element>(&mut self) -> Result<&mut [T]> {
        if let Mem::Pinned(b) = &self.mem {
            b.wait_unused()?;
        }
        Ok(self.as_mut_slice())
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        self.account.release(self.len);
    }
}
