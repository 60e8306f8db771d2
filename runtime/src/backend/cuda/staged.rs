//! Pageable host memory to and from a device, staged through the pinned pool: chunks
//! double-buffered on a side copy stream, the host-side copies spread over threads.
//! A direct copy from pageable memory makes the driver stage it through one small
//! buffer on one thread; this keeps the DMA engine busy instead.

use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, LazyLock, Mutex};

use cudarc::driver::result;

use super::device::{driver, DeviceState};
use super::stream::{EventObj, StreamObj};
use crate::backend::RawEvent;
use crate::error::Result;
use crate::pinned;

/// Copies at least this large are staged; smaller ones go direct.
pub(super) const STAGE_MIN: usize = 4 << 20;
const CHUNK: usize = 8 << 20;
/// Host copies below this size are not worth splitting over threads.
const SPLIT_MIN: usize = 1 << 20;

/// Host-to-device: `data` into device memory at `dst`, ordered after `stream`'s work
/// and before what `stream` queues next. `data` may be dropped when this returns.
/// (Page-locking the source in place with `cuMemHostRegister` instead was measured on
/// the H200 at 18 GB/s against 19-29 GB/s for staging, so locus stages.)
pub(super) fn upload(dev: &DeviceState, stream: &StreamObj, dst: u64, data: &[u8]) -> Result<()> {
    upload_staged(dev, stream, dst, data)
}

/// Host-to-device through two pinned stages.
fn upload_staged(dev: &DeviceState, stream: &StreamObj, dst: u64, data: &[u8]) -> Result<()> {
    if data.len() < STAGE_MIN {
        if !data.is_empty() {
            unsafe { result::memcpy_htod_async(dst, data, stream.raw.0) }
                .map_err(driver(dev.ordinal, "cuMemcpyHtoDAsync"))?;
        }
        return Ok(());
    }
    let (side, stages, events) = double_buffer(dev, stream)?;
    let mut used = [false; 2];
    for (i, chunk) in data.chunks(CHUNK).enumerate() {
        let k = i % 2;
        if used[k] {
            events[k].synchronize()?; // the DMA that last read this stage is done
        }
        // SAFETY: the stage holds CHUNK >= chunk.len() bytes, and no copy reads it now.
        let stage = unsafe { std::slice::from_raw_parts_mut(stages[k].ptr(), chunk.len()) };
        parallel_copy(stage, chunk);
        unsafe { result::memcpy_htod_async(dst + (i * CHUNK) as u64, &stage[..], side.raw.0) }
            .map_err(driver(dev.ordinal, "cuMemcpyHtoDAsync"))?;
        events[k].record(side)?;
        used[k] = true;
    }
    stream.wait_for(side)?;
    // The stages go back to the pool, which reuses them once their last copy is done.
    for (stage, ev) in stages.iter().zip(events) {
        stage.hold_until(RawEvent::Cuda(Arc::new(ev)));
    }
    Ok(())
}

/// The side stream (after `stream`'s work so far), two pinned stages and an event each.
fn double_buffer<'d>(
    dev: &'d DeviceState,
    stream: &StreamObj,
) -> Result<(&'d Arc<StreamObj>, [pinned::PinnedBlock; 2], [EventObj; 2])> {
    let side = dev.copy_stream()?;
    side.wait_for(stream)?;
    let stages = [pinned::acquire(CHUNK)?, pinned::acquire(CHUNK)?];
    let event = || EventObj::create(dev.ordinal, dev.ctx.cu_ctx(), false);
    Ok((side, stages, [event()?, event()?]))
}

/// Device-to-host: `bytes` of device memory at `src`, after `stream`'s work, into `out`.
/// Returns when `out` holds the data.
pub(super) fn download(dev: &DeviceState, stream: &StreamObj, src: u64, out: &mut [u8]) -> Result<()> {
    let (side, stages, events) = double_buffer(dev, stream)?;
    let mut chunks: Vec<&mut [u8]> = out.chunks_mut(CHUNK).collect();
    let n = chunks.len();
    let issue = |i: usize, len: usize| -> Result<()> {
        let k = i % 2;
        // SAFETY: the stage holds CHUNK >= len bytes; the previous copy out of it finished.
        let stage = unsafe { std::slice::from_raw_parts_mut(stages[k].ptr(), len) };
        unsafe { result::memcpy_dtoh_async(stage, src + (i * CHUNK) as u64, side.raw.0) }
            .map_err(driver(dev.ordinal, "cuMemcpyDtoHAsync"))?;
        events[k].record(side)
    };
    if n > 0 {
        issue(0, chunks[0].len())?;
    }
    for i in 0..n {
        // Queue the next chunk's DMA before copying this one out, so the two overlap.
        if i + 1 < n {
            issue(i + 1, chunks[i + 1].len())?;
        }
        let k = i % 2;
        events[k].synchronize()?;
        // SAFETY: the DMA into this stage is complete and nothing else writes it.
        let stage = unsafe { std::slice::from_raw_parts(stages[k].ptr(), chunks[i].len()) };
        parallel_copy(chunks[i], stage);
    }
    // Keep the source alive and ordered: `stream` frees it only after the side stream.
    stream.wait_for(side)?;
    Ok(())
}

/// Copies `len` bytes with non-temporal stores where the CPU has them: the destination
/// is not read first and not kept in cache, which saves a third of the memory traffic
/// of a plain copy (these copies are bound by memory bandwidth, not by the CPU).
///
/// # Safety
/// `src` and `dst` are valid for `len` bytes and do not overlap.
unsafe fn stream_copy(dst: *mut u8, src: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};
        // Align the destination to 16 bytes with a plain copy of the head.
        let head = dst.align_offset(16).min(len);
        std::ptr::copy_nonoverlapping(src, dst, head);
        let body = (len - head) / 16;
        let (s, d) = (src.add(head), dst.add(head));
        for i in 0..body {
            // SSE2 is part of x86_64, so these need no feature check.
            let v = _mm_loadu_si128(s.add(i * 16) as *const __m128i);
            _mm_stream_si128(d.add(i * 16) as *mut __m128i, v);
        }
        _mm_sfence();
        let done = head + body * 16;
        std::ptr::copy_nonoverlapping(src.add(done), dst.add(done), len - done);
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::ptr::copy_nonoverlapping(src, dst, len);
}

/// `dst.copy_from_slice(src)`, split over the copy threads when large.
fn parallel_copy(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "parallel_copy of unequal lengths");
    let threads = COPIERS.threads;
    if src.len() < 2 * SPLIT_MIN || threads < 2 {
        // SAFETY: equal lengths (checked above), and &mut excludes overlap.
        unsafe { stream_copy(dst.as_mut_ptr(), src.as_ptr(), src.len()) };
        return;
    }
    let part = src.len().div_ceil(threads).max(SPLIT_MIN);
    let parts: Vec<(usize, usize, usize)> = src
        .chunks(part)
        .enumerate()
        .map(|(i, c)| (dst.as_mut_ptr() as usize + i * part, c.as_ptr() as usize, c.len()))
        .collect();
    let latch = Arc::new((Mutex::new(parts.len()), Condvar::new()));
    for (d, s, len) in parts {
        let latch = Arc::clone(&latch);
        let job: Job = Box::new(move || {
            // SAFETY: the parts are disjoint ranges of `dst` and `src`, both alive until
            // the latch below reaches zero.
            unsafe { stream_copy(d as *mut u8, s as *const u8, len) };
            let (left, cv) = &*latch;
            let mut left = left.lock().unwrap_or_else(|p| p.into_inner());
            *left -= 1;
            if *left == 0 {
                cv.notify_all();
            }
        });
        if let Err(e) = COPIERS.send(job) {
            // No copy thread: do it here.
            (e.0)();
        }
    }
    let (left, cv) = &*latch;
    let mut left = left.lock().unwrap_or_else(|p| p.into_inner());
    while *left > 0 {
        left = cv.wait(left).unwrap_or_else(|p| p.into_inner());
    }
}

type Job = Box<dyn FnOnce() + Send>;

/// A few long-lived threads for host-side copies (spawning per chunk costs more than
/// the copy saves).
struct Copiers {
    tx: Mutex<Sender<Job>>,
    threads: usize,
}

impl Copiers {
    fn send(&self, job: Job) -> std::result::Result<(), std::sync::mpsc::SendError<Job>> {
        self.tx.lock().unwrap_or_else(|p| p.into_inner()).send(job)
    }
}

static COPIERS: LazyLock<Copiers> = LazyLock::new(|| {
    // LOCUS_COPY_THREADS tunes the count (default: the cores, at most 8).
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let threads = std::env::var("LOCUS_COPY_THREADS")
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .unwrap_or(cores.min(8))
        .clamp(1, 64);
    let (tx, rx) = channel::<Job>();
    let rx = Arc::new(Mutex::new(rx));
    let mut started = 0;
    for i in 0..threads {
        let rx = Arc::clone(&rx);
        let spawned = std::thread::Builder::new().name(format!("locus-copy-{i}")).spawn(move || loop {
            let job = match rx.lock().unwrap_or_else(|p| p.into_inner()).recv() {
                Ok(job) => job,
                Err(_) => return,
            };
            job();
        });
        started += spawned.is_ok() as usize;
    }
    Copiers { tx: Mutex::new(tx), threads: started }
});

#[cfg(test)]
mod tests {
    use super::parallel_copy;

    #[test]
    fn parallel_copy_is_exact_at_any_length_and_alignment() {
        let src: Vec<u8> = (0..(5 << 20) + 77).map(|i| (i * 31 % 253) as u8).collect();
        for (off, len) in [(0, 0), (1, 15), (3, 4099), (7, 3 << 20), (0, (5 << 20) + 77)] {
            let len = len.min(src.len() - off);
            let mut dst = vec![0u8; len + 16];
            parallel_copy(&mut dst[off % 16..off % 16 + len], &src[off..off + len]);
            assert_eq!(&dst[off % 16..off % 16 + len], &src[off..off + len], "offset {off}, length {len}");
        }
    }
}
