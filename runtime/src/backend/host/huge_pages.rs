//! Large host buffers in their own anonymous mapping, advised for transparent huge pages.
//!
//! A new host buffer starts zeroed and untouched, so its pages are first touched by
//! whoever fills it: a download from a device, a host kernel. With 4 KiB pages that is
//! one page fault per 4 KiB, and on the H200's host it held a download into a new tensor
//! to about 5 GB/s; a 2 MiB huge page takes one fault per 2 MiB. Buffers of at least
//! [`HUGE_PAGE`] bytes are mapped 2 MiB-aligned and advised `MADV_HUGEPAGE` (what
//! PyTorch's `THP_MEM_ALLOC_ENABLE` does); where transparent huge pages are off, or on
//! other systems, they come from the global allocator like the rest.

use std::ptr::NonNull;

/// The huge page size, and the smallest buffer mapped on its own.
pub(crate) const HUGE_PAGE: usize = 2 << 20;

/// Zeroed host memory in an anonymous mapping of whole huge pages, unmapped on drop.
#[derive(Debug)]
pub(crate) struct Mapping {
    ptr: NonNull<u8>,
    /// Bytes mapped: a multiple of [`HUGE_PAGE`].
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value alone; access goes through
// `&self` / `&mut self` like a `Vec`'s.
unsafe impl Send for Mapping {}
// SAFETY: shared access is `&self` only, which hands out nothing but the address; writes
// through it need `unsafe` and the owner's `&mut` (as in `HostBuffer::bytes_mut`).
unsafe impl Sync for Mapping {}

impl Mapping {
    /// `bytes` zeroed bytes, 2 MiB-aligned, or `None` where huge pages are not to be had
    /// (the caller then uses the global allocator).
    pub(in crate::backend) fn zeroed(bytes: usize) -> Option<Mapping> {
        if bytes < HUGE_PAGE || !thp_available() {
            return None;
        }
        Self::map(bytes)
    }

    #[cfg(target_os = "linux")]
    fn map(bytes: usize) -> Option<Mapping> {
        let len = bytes.checked_next_multiple_of(HUGE_PAGE)?;
        // Map one huge page more than needed, then trim both ends to a 2 MiB boundary.
        let span = len.checked_add(HUGE_PAGE)?;
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                span,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        let addr = p as usize;
        let start = addr.next_multiple_of(HUGE_PAGE);
        let (head, tail) = (start - addr, addr + span - (start + len));
        // SAFETY: both ranges lie within the mapping just made and outside what is kept.
        // A failed advice only means 4 KiB pages.
        unsafe {
            if head > 0 {
                libc::munmap(p, head);
            }
            if tail > 0 {
                libc::munmap((start + len) as *mut libc::c_void, tail);
            }
            libc::madvise(start as *mut libc::c_void, len, libc::MADV_HUGEPAGE);
        }
        Some(Mapping { ptr: NonNull::new(start as *mut u8)?, len })
    }

    #[cfg(not(target_os = "linux"))]
    fn map(_bytes: usize) -> Option<Mapping> {
        None
    }

    pub(in crate::backend) fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        #[cfg(target_os = "linux")]
        // SAFETY: this value owns the mapping, and no slice of it outlives `self`.
        unsafe {
            libc::munmap(self.ptr.as_ptr() as *mut libc::c_void, self.len);
        }
    }
}

/// Whether the kernel hands out transparent huge pages to a mapping that asks for them
/// (`always` or `madvise`, not `never`). Read once.
fn thp_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .is_ok_and(|mode| !mode.contains("[never]"))
    })
}

#[cfg(test)]
mod tests {
    use crate::backend::host::huge_pages::*;

    #[test]
    fn mappings_are_zeroed_aligned_writable_and_small_sizes_are_refused() {
        assert!(Mapping::zeroed(HUGE_PAGE - 1).is_none());
        let Some(m) = Mapping::zeroed(HUGE_PAGE + 5) else {
            return; // no transparent huge pages on this machine: the global allocator serves
        };
        assert_eq!(m.as_ptr() as usize % HUGE_PAGE, 0);
        assert_eq!(m.len, 2 * HUGE_PAGE);
        // SAFETY: the mapping holds `m.len` bytes and this test owns it.
        let bytes = unsafe { std::slice::from_raw_parts_mut(m.as_ptr(), m.len) };
        assert!(bytes.iter().all(|&b| b == 0));
        bytes.fill(7);
        assert!(bytes.iter().all(|&b| b == 7));
    }
}
