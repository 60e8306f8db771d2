//! Checks made on the device: a kernel that finds bad input (an integer divisor of zero,
//! an index out of range) writes it into one 8-byte word of device memory, which the host
//! reads back after the launch. This costs a wait for the stream, so only the ops that
//! must check use it (and graph captures refuse them, `capture`).

use std::sync::Arc;

use cudarc::driver::result;

use crate::backend::cuda::driver::buffer::CudaBuffer;
use crate::backend::cuda::driver::device::{driver, DeviceState};
use crate::backend::cuda::driver::stream::CudaStream;
use crate::error::Result;

/// Runs `launch` with a fresh 8-byte device word whose bytes are all `init`, ordered on
/// `s`, then waits for `s` and returns the word. `launch` queues its kernels on `s` and
/// passes them the word's address.
pub(in crate::backend::cuda) fn with_flag(
    dev: &'static DeviceState,
    s: &Arc<CudaStream>,
    init: u8,
    launch: impl FnOnce(&CudaBuffer) -> Result<()>,
) -> Result<u64> {
    let flag = CudaBuffer::alloc(dev, s, 8)?;
    let d = |call| driver(s.ordinal, call);
    // SAFETY: `flag` is a live 8-byte allocation of this device made on `s` (held to the
    // end of this function, and its free is ordered on `s` after the sync below); `s` is a
    // live stream of the device, whose context `alloc` made current.
    unsafe { result::memset_d8_async(flag.ptr(), init, 8, s.raw.0) }.map_err(d("cuMemsetD8Async"))?;
    launch(&flag)?;
    let mut word = [0u64];
    // SAFETY: 8 bytes from `flag` (8 bytes, set above and written only by the launch, all
    // on `s`) into `word`, one `u64` that lives on this frame until the `synchronize`
    // below has waited for the copy.
    unsafe { result::memcpy_dtoh_async(&mut word, flag.ptr(), s.raw.0) }.map_err(d("cuMemcpyDtoHAsync"))?;
    s.synchronize()?;
    Ok(word[0])
}

/// Runs `launch` with a word for `report_index` (common.cuh): all ones before the launch,
/// after it the first bad index reported, as `(position, value)`, or `None`.
pub(in crate::backend::cuda) fn first_bad_index(
    dev: &'static DeviceState,
    s: &Arc<CudaStream>,
    launch: impl FnOnce(&CudaBuffer) -> Result<()>,
) -> Result<Option<(usize, i32)>> {
    with_flag(dev, s, 0xff, launch).map(decode)
}

/// A word `report_index` wrote: the position in the high half, the index's bits in the
/// low half; all ones when nothing was reported.
fn decode(word: u64) -> Option<(usize, i32)> {
    (word != u64::MAX).then_some(((word >> 32) as usize, word as u32 as i32))
}

#[cfg(test)]
mod tests {
    use crate::backend::cuda::driver::flag::decode;

    #[test]
    fn a_reported_index_decodes_to_its_position_and_value() {
        assert_eq!(decode(u64::MAX), None);
        assert_eq!(decode((7 << 32) | u64::from(-3i32 as u32)), Some((7, -3)));
        assert_eq!(decode(u64::from(i32::MAX as u32)), Some((0, i32::MAX)));
        assert_eq!(decode(0xffff_fffe_8000_0000), Some((0xffff_fffe, i32::MIN)));
    }
}
