//! Checks made on the device: a kernel that finds bad input (an integer divisor of zero,
//! an index out of range) writes it into one 8-byte word of device memory, which the host
//! reads back after the launch. This costs a wait for the stream, so only the ops that
//! must check use it. A graph capture cannot read back: an index checked on the device is
//! an input of the graph, checked before each replay instead ([`check_rules`]), or where
//! it was copied from ([`check_source`]).

use std::sync::Arc;

use cudarc::driver::result;
use locus_kernels::Source;

use crate::backend::cuda::driver::buffer::CudaBuffer;
use crate::backend::cuda::driver::device::{driver, DeviceState};
use crate::backend::cuda::driver::launch::KernelArgs;
use crate::backend::cuda::driver::stream::CudaStream;
use crate::backend::sync::capture::{computed_indices, IndexRule};
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
    with_words(dev, s, init, 1, launch).map(|w| w[0])
}

/// [`with_flag`] with `n` words (at least one), in one buffer, read back at once.
fn with_words(
    dev: &'static DeviceState,
    s: &Arc<CudaStream>,
    init: u8,
    n: usize,
    launch: impl FnOnce(&CudaBuffer) -> Result<()>,
) -> Result<Vec<u64>> {
    let flag = CudaBuffer::alloc(dev, s, 8 * n.max(1))?;
    let d = |call| driver(s.ordinal, call);
    // SAFETY: `flag` is a live allocation of `8 * n` bytes of this device made on `s` (held
    // to the end of this function, and its free is ordered on `s` after the sync below);
    // `s` is a live stream of the device, whose context `alloc` made current.
    unsafe { result::memset_d8_async(flag.ptr(), init, flag.bytes(), s.raw.0) }.map_err(d("cuMemsetD8Async"))?;
    launch(&flag)?;
    let mut words = vec![0u64; n.max(1)];
    // SAFETY: `8 * n` bytes from `flag` (as many, set above and written only by the
    // launch, all on `s`) into `words`, `n` `u64`s that live on this frame until the
    // `synchronize` below has waited for the copy.
    unsafe { result::memcpy_dtoh_async(&mut words, flag.ptr(), s.raw.0) }.map_err(d("cuMemcpyDtoHAsync"))?;
    s.synchronize()?;
    Ok(words)
}

/// Runs `launch` with a word for `report_index` (common.cuh): all ones before the launch,
/// after it the first bad index reported, as `(position, value)`, or `None`. `launch`
/// reads the indices of `rule` in `index`.
///
/// In a capture nothing runs, so nothing can be read back: the indices must be an input
/// of the graph, and the capture keeps `rule`, which each replay checks first
/// ([`check_rules`]); the word is the graph's, and `None` is returned.
pub(in crate::backend::cuda) fn first_bad_index(
    dev: &'static DeviceState,
    s: &Arc<CudaStream>,
    (index, rule): (&CudaBuffer, IndexRule),
    launch: impl FnOnce(&CudaBuffer) -> Result<()>,
) -> Result<Option<(usize, i32)>> {
    let Some(c) = s.capture() else {
        return with_flag(dev, s, 0xff, launch).map(decode);
    };
    if index.made_in(&c) {
        return Err(computed_indices(rule.op()));
    }
    // `alloc` had the indices read on `s`, which is an error unless they are an input.
    c.require(rule);
    let word = CudaBuffer::alloc(dev, s, 8)?;
    // SAFETY: `word` is 8 bytes of the graph's memory (made on the captured stream `s`,
    // freed with the graph), set on `s` before the captured launch that reports into it;
    // the driver records the memset into the graph.
    unsafe { result::memset_d8_async(word.ptr(), 0xff, 8, s.raw.0) }.map_err(driver(s.ordinal, "cuMemsetD8Async"))?;
    launch(&word)?;
    Ok(None)
}

/// Checks the indices of every rule of a graph on `s` before a replay, with one read back:
/// the error of the first rule with an index out of range. `s` is ordered after the
/// writes of the graph's inputs, where the rules' indices are.
pub(in crate::backend::cuda) fn check_rules(
    dev: &'static DeviceState,
    s: &Arc<CudaStream>,
    rules: &[IndexRule],
) -> Result<()> {
    match first_bad(dev, s, rules)? {
        Some((i, at, v)) => Err(rules[i].error(at, v.into())),
        None => Ok(()),
    }
}

/// `limits` (`(count, bound)`, a graph input's rules) checked against the first i32 of
/// `indices`, the source of a write into that input, on the current stream after the
/// source's writes: the first limit broken, as `(limit, position, index)`.
pub(in crate::backend::cuda) fn check_source(
    indices: &CudaBuffer,
    limits: &[(usize, usize)],
) -> Result<Option<(usize, usize, i32)>> {
    let dev = indices.device();
    let s = crate::backend::cuda::driver::memory::current(dev);
    indices.use_on(&s)?;
    let bytes = indices.bytes();
    if let Some(&(count, _)) = limits.iter().find(|l| l.0.checked_mul(4).is_none_or(|b| b > bytes)) {
        return Err(crate::error::Error::InvalidArgument {
            op: "copy_from",
            reason: format!("{count} indices to check in a source of {bytes} bytes"),
        });
    }
    let rules: Vec<IndexRule> = limits.iter().map(|&l| IndexRule::limit(indices.ptr(), l)).collect();
    first_bad(dev, &s, &rules)
}

/// Launches `index_check` for each rule (its indices at `rule.addr`), reads the words back
/// (a wait for `s`): the first rule with an index out of range, as `(rule, position,
/// index)`.
fn first_bad(
    dev: &'static DeviceState,
    s: &Arc<CudaStream>,
    rules: &[IndexRule],
) -> Result<Option<(usize, usize, i32)>> {
    if rules.is_empty() {
        return Ok(None);
    }
    let f = dev.function(Source::Gather, "index_check")?;
    let words = with_words(dev, s, 0xff, rules.len(), |words| {
        for (i, r) in rules.iter().enumerate() {
            let count = r.count as u64;
            let args = KernelArgs::new().val(r.addr).u64(count).u64(r.bound() as u64).ptr_at(words, 8 * i as u64);
            // SAFETY: `index_check(const i32* index, u64 count, u64 size, u64* err)` reads
            // `count` i32 at `r.addr`: the start of an input of the graph that held those
            // indices at the capture (the rule's op read them there), alive and unchanged in
            // size while the graph borrows it, or of a source of at least `4 * count` bytes
            // (`check_source` checked), either ordered on `s` by the caller; it writes word
            // `i` of `words` only.
            unsafe { dev.launch(f, (dev.grid(count, 256), 1, 1), (256, 1, 1), s, args)? };
        }
        Ok(())
    })?;
    Ok(words.into_iter().enumerate().find_map(|(i, w)| decode(w).map(|(at, v)| (i, at, v))))
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
