//! Copies between pageable host memory and a device, staged through the pinned pool.
//!
//! A direct copy from pageable memory makes the driver stage it itself, through small
//! buffers on one thread: about 9 GB/s on the H200's host. Which copy takes which way is
//! decided by size in `transfer::paths`: a middle-sized upload goes inline (one pinned block,
//! piece by piece, on the op's stream: `inline.rs`); a large copy is cut into chunks
//! that the copy threads take in turn. Each thread moves its chunks through two pinned
//! stages of its own and queues their DMAs itself on the device's copy stream, so no
//! thread waits for another: while one chunk's DMA runs, the other threads copy.

use std::mem::MaybeUninit;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use cudarc::driver::result;

use crate::backend::cuda::driver::device::{dma, driver, DeviceState};
use crate::backend::cuda::driver::event::CudaEvent;
use crate::backend::cuda::driver::stream::CudaStream;
use crate::backend::cuda::driver::timing;
use crate::backend::cuda::transfer::inline::{InlineDma, InlineDownload};
use crate::backend::pinned_pool::{self as pinned, PinnedBlock};
use crate::backend::transfer::download;
use crate::backend::transfer::paths::{self, CopyPath};
use crate::backend::transfer::stream_copy::stream_copy;
use crate::backend::transfer::upload;
use crate::backend::workers::{copy_threads, on_copiers};
use crate::error::Result;

/// Chunks are powers of two in this range: every thread gets a few, and a chunk's driver calls cost little.
const CHUNK_MIN: usize = 1 << 20;
const CHUNK_MAX: usize = 2 << 20;

/// Host-to-device: `data` into device memory at `dst`, ordered after `stream`'s work
/// and before what `stream` queues next. `data` may be dropped when this returns.
/// (Page-locking the source in place with `cuMemHostRegister` instead was measured on
/// the H200 at 18 GB/s, slower than staging.)
///
/// # Safety
/// `dst .. dst + data.len()` lies within a live allocation of `dev`, which stays
/// allocated until `stream`'s work queued before its next use is done (a buffer freed
/// stream-ordered on `stream`), and nothing else writes or reads it until then unless
/// ordered after `stream`. `dev`'s context is current on this thread.
pub(in crate::backend::cuda) unsafe fn upload(
    dev: &DeviceState,
    stream: &CudaStream,
    dst: u64,
    data: &[u8],
) -> Result<()> {
    if data.is_empty() {
        return Ok(());
    }
    match paths::upload_path(data.len()) {
        // SAFETY: the caller's contract, passed on.
        CopyPath::Direct => unsafe { upload_direct(dev, stream, dst, data) },
        CopyPath::Inline => {
            // SAFETY: the caller's contract is `InlineDma`'s: `dst` has `data.len()` bytes
            // ordered on `stream`, and `dev`'s context is current.
            let mut dma = unsafe { InlineDma::new(dev, stream, dst, data.len()) };
            upload::upload_inline(data, &mut dma)
        }
        // SAFETY: the caller's contract, passed on.
        CopyPath::Staged => unsafe { upload_staged(dev, stream, dst, data) },
    }
}

/// [`upload`] as one direct copy from the source, which the driver stages itself.
///
/// # Safety
/// As [`upload`].
unsafe fn upload_direct(dev: &DeviceState, stream: &CudaStream, dst: u64, data: &[u8]) -> Result<()> {
    let span = timing::begin(stream);
    // `dst` holds at least `data.len()` bytes of this device (the caller's contract) and is written on
    // `stream`, whose work orders its later uses. `data` is valid for reads until this function returns: the
    // driver stages pageable memory before returning, and page-locked memory is waited for just below.
    // SAFETY: as said just above.
    let r = dma(|| unsafe { result::memcpy_htod_async(dst, data, stream.raw.0) });
    let r = r.map_err(driver(dev.ordinal, "cuMemcpyHtoDAsync"));
    timing::finish(span, stream, &r, || timing::copy("HtoD", data.len(), "direct"));
    r?;
    // The driver stages a small pageable copy before it returns, but reads page-locked
    // memory (a slice of a pinned tensor, say) by DMA later: then wait, since `data` is
    // only borrowed for this call.
    if is_page_locked(data.as_ptr()) {
        stream.synchronize()?;
    }
    Ok(())
}

/// [`upload`] through the copy threads' pinned stages.
///
/// # Safety
/// As [`upload`].
unsafe fn upload_staged(dev: &DeviceState, stream: &CudaStream, dst: u64, data: &[u8]) -> Result<()> {
    staged(dev, stream, data.len(), &|lane: &mut Lane| {
        while let Some(range) = lane.next_chunk() {
            let k = lane.turn();
            let stage = lane.stage(k, range.len())?;
            // SAFETY: the stage holds `range.len()` bytes (a slice of that length) and is
            // pinned pool memory, not the source; the source slice has `range.len()` bytes.
            unsafe { stream_copy(stage.as_mut_ptr(), data[range.clone()].as_ptr(), range.len()) };
            let span = timing::begin(lane.side);
            // `range` lies within `0 .. data.len()`, so `dst + range.start` has `range.len()` bytes within the caller's
            // allocation (contract). The side stream waited for `stream` (in `staged`), and `stream` waits for the side
            // stream before this copy returns, so the write is ordered like one on `stream`.
            // The stage is pinned and is not written again until this DMA's event (recorded by `queued`)
            // completes, nor freed before (the pool holds it until then).
            // SAFETY: as said just above.
            let r = dma(|| unsafe { result::memcpy_htod_async(dst + range.start as u64, &stage[..], lane.side.raw.0) })
                .map_err(driver(dev.ordinal, "cuMemcpyHtoDAsync"));
            timing::finish(span, lane.side, &r, || timing::copy("HtoD", range.len(), "staged"));
            r?;
            lane.queued(k)?;
        }
        Ok(())
    })
}

/// Host-to-device for many pieces at once: each `(dst, data)` into device memory at
/// `dst`, ordered after `stream`'s work and before what `stream` queues next, through one
/// staged pass over all of them as if they were one buffer (a chunk may hold the end of
/// one piece and the start of the next, and queues one DMA per piece it holds). The
/// data may be dropped when this returns.
///
/// # Safety
/// As [`upload`], for every piece: `dst .. dst + data.len()` lies within a live
/// allocation of `dev` as that contract says, and the pieces' ranges do not overlap.
pub(in crate::backend::cuda) unsafe fn upload_pieces(
    dev: &DeviceState,
    stream: &CudaStream,
    pieces: &[(u64, &[u8])],
) -> Result<()> {
    let total = pieces.iter().map(|(_, d)| d.len()).sum::<usize>();
    if paths::upload_path(total) != CopyPath::Staged {
        for (dst, data) in pieces {
            // SAFETY: the caller's contract, piece by piece.
            unsafe { upload(dev, stream, *dst, data)? };
        }
        return Ok(());
    }
    // Where each piece starts in the concatenation.
    let mut starts = Vec::with_capacity(pieces.len());
    let mut at = 0;
    for (_, d) in pieces {
        starts.push(at);
        at += d.len();
    }
    staged(dev, stream, total, &|lane: &mut Lane| {
        while let Some(range) = lane.next_chunk() {
            let k = lane.turn();
            let stage = lane.stage(k, range.len())?;
            // The pieces that overlap `range`: from the last one starting at or before it.
            let first = starts.partition_point(|&s| s <= range.start).saturating_sub(1);
            let overlaps = || {
                (first..pieces.len()).map_while(|i| (starts[i] < range.end).then_some(i)).filter_map(|i| {
                    let (lo, hi) = (range.start.max(starts[i]), range.end.min(starts[i] + pieces[i].1.len()));
                    (lo < hi).then_some((i, lo, hi))
                })
            };
            for (i, lo, hi) in overlaps() {
                let src = &pieces[i].1[lo - starts[i]..hi - starts[i]];
                let at = &mut stage[lo - range.start..hi - range.start];
                // SAFETY: `at` and `src` both hold `hi - lo` bytes; the stage is pinned
                // pool memory, not the source.
                unsafe { stream_copy(at.as_mut_ptr(), src.as_ptr(), hi - lo) };
            }
            for (i, lo, hi) in overlaps() {
                let dst = pieces[i].0 + (lo - starts[i]) as u64;
                let span = timing::begin(lane.side);
                // `lo - starts[i] .. hi - starts[i]` lies within piece `i`, so `dst` has `hi - lo` bytes within its
                // allocation (the caller's contract); the side stream waited for `stream` (in `staged`) and `stream`
                // waits for it before this returns, so the write is ordered like one on `stream`.
                // the stage is pinned and not written again until this chunk's event (recorded by `queued`,
                // after every DMA of the chunk) completes, nor freed before (the pool holds it until then).
                // SAFETY: as said just above.
                let r = dma(|| unsafe {
                    result::memcpy_htod_async(dst, &stage[lo - range.start..hi - range.start], lane.side.raw.0)
                })
                .map_err(driver(dev.ordinal, "cuMemcpyHtoDAsync"));
                timing::finish(span, lane.side, &r, || timing::copy("HtoD", hi - lo, "staged"));
                r?;
            }
            lane.queued(k)?;
        }
        Ok(())
    })
}

/// Device-to-host: `out.len()` bytes at `src`, after `stream`'s work, into `out` (maybe
/// uninitialized). Returns when every byte of `out` holds the data.
///
/// # Safety
/// `src .. src + out.len()` lies within a live allocation of `dev` that was written
/// before this point of `stream`'s order and stays allocated until `stream`'s work queued
/// now is done (a buffer ready on `stream` and freed after it). `dev`'s context is current.
pub(in crate::backend::cuda) unsafe fn download(
    dev: &DeviceState,
    stream: &CudaStream,
    src: u64,
    out: &mut [MaybeUninit<u8>],
) -> Result<()> {
    match paths::download_path(out.len()) {
        CopyPath::Direct => {
            let span = timing::begin(stream);
            // `src` holds `out.len()` bytes ready on `stream` (the caller's contract);
            // `out` is borrowed mutably for this call, which waits for the copy (synchronize
            // below) before returning, so the DMA never outlives the borrow.
            // SAFETY: as said just above.
            let r = dma(|| unsafe { result::memcpy_dtoh_async(&mut out[..], src, stream.raw.0) })
                .map_err(driver(dev.ordinal, "cuMemcpyDtoHAsync"));
            timing::finish(span, stream, &r, || timing::copy("DtoH", out.len(), "direct"));
            r?;
            stream.synchronize()
        }
        CopyPath::Inline => {
            // SAFETY: the caller's contract is `InlineDownload`'s: `src` has `out.len()`
            // bytes ready on `stream` and allocated until its work is done.
            let mut dma = unsafe { InlineDownload::new(dev, stream, src, out.len()) };
            download::download_inline(out, &mut dma)
        }
        // SAFETY: the caller's contract, passed on.
        CopyPath::Staged => unsafe { download_staged(dev, stream, src, out) },
    }
}

/// [`download`] through the copy threads' pinned stages.
///
/// # Safety
/// As [`download`].
unsafe fn download_staged(dev: &DeviceState, stream: &CudaStream, src: u64, out: &mut [MaybeUninit<u8>]) -> Result<()> {
    // The threads write disjoint chunks of `out`, so they share it as an address.
    let base = out.as_mut_ptr() as usize;
    staged(dev, stream, out.len(), &|lane: &mut Lane| {
        // Queue the DMA of the next chunk before copying out the one before it.
        let mut landing: Option<(usize, Range<usize>)> = None;
        loop {
            let next = match lane.next_chunk() {
                Some(range) => {
                    let k = lane.turn();
                    let stage = lane.stage(k, range.len())?;
                    let span = timing::begin(lane.side);
                    let from = src + range.start as u64;
                    // `range` lies within `0 .. out.len()`, so `from` has `range.len()` bytes within the caller's
                    // allocation, ordered after its writer (the side stream waited for `stream` in `staged`) and
                    // freed only after the side stream's work (`stream` waits for it at the end). The stage is
                    // pinned, `range.len()` bytes long, idle (`lane.stage` waited for its last DMA), and read only
                    // after this DMA's event completes.
                    // SAFETY: as said just above.
                    let r = dma(|| unsafe { result::memcpy_dtoh_async(stage, from, lane.side.raw.0) })
                        .map_err(driver(dev.ordinal, "cuMemcpyDtoHAsync"));
                    timing::finish(span, lane.side, &r, || timing::copy("DtoH", range.len(), "staged"));
                    r?;
                    lane.queued(k)?;
                    Some((k, range))
                }
                None => None,
            };
            if let Some((k, range)) = landing.take() {
                // Waits for its DMA.
                let stage = lane.stage(k, range.len())?;
                // SAFETY: the chunk `range` is within `out` (of `len` bytes), which outlives
                // this call, and no other thread takes the same chunk; the stage holds
                // `range.len()` bytes and is pinned pool memory, not part of `out`.
                unsafe { stream_copy((base + range.start) as *mut u8, stage.as_ptr(), range.len()) };
            }
            if next.is_none() {
                break;
            }
            landing = next;
        }
        Ok(())
    })
}

/// Whether `ptr` is host memory the driver knows as page-locked (from `cuMemHostAlloc`
/// or registered), which copies read asynchronously.
fn is_page_locked(ptr: *const u8) -> bool {
    let mut kind: u32 = 0;
    // SAFETY: the attribute is a `CUmemorytype` (a 32-bit enum) written into `kind`;
    // the driver only inspects the address. Pageable memory is an error, which means
    // "not page-locked" here.
    let r = unsafe {
        cudarc::driver::sys::cuPointerGetAttribute(
            &mut kind as *mut u32 as *mut std::ffi::c_void,
            cudarc::driver::sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
            ptr as cudarc::driver::sys::CUdeviceptr,
        )
    };
    r == cudarc::driver::sys::CUresult::CUDA_SUCCESS
        && kind == cudarc::driver::sys::CUmemorytype::CU_MEMORYTYPE_HOST as u32
}

/// What the threads of one staged copy share: the next chunk to take, and whether one
/// thread failed (the others then stop taking chunks).
struct Plan {
    len: usize,
    chunk: usize,
    next: AtomicUsize,
    stop: AtomicBool,
}

/// One thread's part of a staged copy: its two stages, each with the event of the last
/// DMA that used it.
struct Lane<'a> {
    plan: &'a Plan,
    side: &'a CudaStream,
    stages: Vec<(PinnedBlock, CudaEvent, bool)>,
    turns: usize,
}

impl Lane<'_> {
    fn next_chunk(&self) -> Option<Range<usize>> {
        if self.plan.stop.load(Ordering::Relaxed) {
            return None;
        }
        let start = self.plan.next.fetch_add(1, Ordering::Relaxed).checked_mul(self.plan.chunk)?;
        (start < self.plan.len).then(|| start..self.plan.len.min(start + self.plan.chunk))
    }

    /// The stage whose turn it is, alternating.
    fn turn(&mut self) -> usize {
        self.turns += 1;
        self.turns % 2
    }

    /// Stage `k`'s first `len` bytes, once the DMA that last used it has completed.
    #[allow(clippy::mut_from_ref)]
    fn stage(&self, k: usize, len: usize) -> Result<&mut [u8]> {
        let (block, event, queued) = &self.stages[k];
        if *queued {
            event.synchronize()?;
        }
        // SAFETY: the block holds `plan.chunk >= len` bytes, no DMA uses it now, and only
        // this lane's thread touches it.
        Ok(unsafe { std::slice::from_raw_parts_mut(block.ptr(), len) })
    }

    /// Marks the end of the DMA just queued on stage `k`.
    fn queued(&mut self, k: usize) -> Result<()> {
        let (block, event, queued) = &mut self.stages[k];
        match event.record(self.side) {
            Ok(()) => {
                *queued = true;
                Ok(())
            }
            Err(e) => {
                // The DMA is queued but unmarked: wait for it, or never reuse the stage.
                if self.side.synchronize().is_err() {
                    block.retire();
                }
                Err(e)
            }
        }
    }
}

impl Drop for Lane<'_> {
    fn drop(&mut self) {
        // The stages go back to the pool, which reuses them once their last DMA is done.
        for (block, event, queued) in self.stages.drain(..) {
            if queued {
                block.hold_until(Arc::new(event));
            }
        }
    }
}

/// Runs `body` on up to the copy threads' count of lanes, on the device's copy stream
/// ordered after `stream`; what `stream` queues next comes after every DMA queued here,
/// whether the copy succeeded or not.
fn staged(
    dev: &DeviceState,
    stream: &CudaStream,
    len: usize,
    body: &(dyn Fn(&mut Lane) -> Result<()> + Sync),
) -> Result<()> {
    let side = dev.copy_stream()?;
    side.wait_for(stream)?;
    let chunk = (len / (2 * copy_threads())).next_power_of_two().clamp(CHUNK_MIN, CHUNK_MAX);
    let plan = Plan { len, chunk, next: AtomicUsize::new(0), stop: AtomicBool::new(false) };
    let lanes = len.div_ceil(chunk).min(copy_threads());
    let copied = on_copiers(lanes, &|_| {
        let run = || -> Result<()> {
            dev.bind()?;
            let stage = || -> Result<_> {
                Ok((pinned::acquire(chunk)?, CudaEvent::create(dev.ordinal, dev.ctx.cu_ctx(), false)?, false))
            };
            let mut lane = Lane { plan: &plan, side, stages: vec![stage()?, stage()?], turns: 0 };
            body(&mut lane)
        };
        let done = run();
        if done.is_err() {
            plan.stop.store(true, Ordering::Relaxed);
        }
        done
    });
    let ordered = stream.wait_for(side);
    copied.and(ordered)
}
