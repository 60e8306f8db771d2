//! Copies between pageable host memory and a device that both backends share: which
//! path a copy takes by its size ([`paths`]), and the inline upload ([`upload`]) and
//! download ([`download`]) through one block of the pinned pool, and the non-temporal copy
//! that fills pinned blocks ([`stream_copy`]).

pub(crate) mod download;
pub(crate) mod paths;
pub(crate) mod stream_copy;
pub(crate) mod upload;

use std::mem::MaybeUninit;

/// Writes `src` over `dst` (the same length), which may be uninitialized.
pub(crate) fn write_bytes(dst: &mut [MaybeUninit<u8>], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "write_bytes: lengths differ");
    // `dst` and `src` are distinct borrows (one mutable), each `src.len()` bytes long
    // (asserted above); any byte may be written over a `MaybeUninit<u8>`.
    // SAFETY: as said just above.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr().cast::<u8>(), src.len()) }
}

/// `bytes` as memory a download may write: a view of initialized bytes as maybe
/// uninitialized, for the downloads that fill a caller's existing buffer.
///
/// # Safety
/// Nothing may write an uninitialized byte through the view (`MaybeUninit::uninit()`),
/// which would leave `bytes` invalid: give it only to code that writes data, as the
/// downloads do.
pub(crate) unsafe fn as_uninit(bytes: &mut [u8]) -> &mut [MaybeUninit<u8>] {
    let (ptr, len) = (bytes.as_mut_ptr(), bytes.len());
    // `MaybeUninit<u8>` has `u8`'s layout, and the view borrows `bytes` mutably for its
    // life; what is written through it is the caller's contract.
    // SAFETY: as said just above.
    unsafe { std::slice::from_raw_parts_mut(ptr.cast::<MaybeUninit<u8>>(), len) }
}
