//! The non-temporal copy the inline and staged uploads use to fill pinned blocks.

/// Copies `len` bytes with non-temporal stores where the CPU has them: the destination
/// is not read first and not kept in cache, which saves a third of the memory traffic
/// of a plain copy (these copies are bound by memory bandwidth, not by the CPU).
///
/// # Safety
/// `src` and `dst` are valid for `len` bytes and do not overlap.
pub(crate) unsafe fn stream_copy(dst: *mut u8, src: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        // Align the destination to 16 bytes with a plain copy of the head.
        let head = dst.align_offset(16).min(len);
        // SAFETY: `head <= len`, so both ranges are within the caller's valid,
        // non-overlapping `len` bytes.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, head) };
        let body = (len - head) / 16;
        // SAFETY: `head <= len`: both offsets stay within (or one past) the `len` bytes.
        let (s, d) = unsafe { (src.add(head), dst.add(head)) };
        for i in 0..body {
            // SAFETY: `head + i * 16 + 16 <= head + body * 16 <= len`, so the 16 bytes read and written lie within
            // `src` and `dst`; `d + i * 16` is 16-byte aligned (`d` was aligned above), as `_mm_stream_si128` requires,
            // and the load is unaligned-tolerant. SSE2 is part of x86_64, so these need no feature check.
            unsafe {
                let v = _mm_loadu_si128(s.add(i * 16) as *const __m128i);
                _mm_stream_si128(d.add(i * 16) as *mut __m128i, v);
            }
        }
        // SAFETY: a store fence has no memory operands; SSE is part of x86_64. It orders the
        // non-temporal stores above before whatever the caller does next.
        unsafe { _mm_sfence() };
        let done = head + body * 16;
        // SAFETY: `done <= len`: the remaining `len - done` bytes of both ranges.
        unsafe { std::ptr::copy_nonoverlapping(src.add(done), dst.add(done), len - done) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    // SAFETY: the caller's contract: both valid for `len` bytes, not overlapping.
    unsafe {
        std::ptr::copy_nonoverlapping(src, dst, len)
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_copy_is_exact_at_any_length_and_alignment() {
        let src: Vec<u8> = (0..(1 << 20) + 77).map(|i| (i * 31 % 253) as u8).collect();
        for (off, len) in [(0, 0), (1, 15), (3, 4099), (7, 1 << 19), (0, (1 << 20) + 77)] {
            let len = len.min(src.len() - off);
            let mut dst = vec![0u8; len + 16];
            let at = off % 16;
            // SAFETY: `dst[at..]` has `len + 16 - at >= len` bytes and `src[off..]` has at
            // least `len` (clamped above); two distinct vectors.
            unsafe { stream_copy(dst[at..].as_mut_ptr(), src[off..].as_ptr(), len) };
            assert_eq!(&dst[at..at + len], &src[off..off + len], "offset {off}, length {len}");
        }
    }
}
