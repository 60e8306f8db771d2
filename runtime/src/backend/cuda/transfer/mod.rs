//! The cuda backend's copies between host and device memory and between devices:
//! asynchronous copies from and into pinned memory (which hold the pinned block until
//! their event), staged pageable copies, and device-to-device and peer copies.

pub(in crate::backend::cuda) mod inline;
pub(in crate::backend::cuda) mod peer;
pub(in crate::backend::cuda) mod staged;

use std::sync::Arc;

use cudarc::driver::result;

use crate::backend::api::traits::PinnedMemory;
use crate::backend::cuda::driver::buffer::CudaBuffer;
use crate::backend::cuda::driver::device::{dma, driver};
use crate::backend::cuda::driver::event::CudaEvent;
use crate::backend::cuda::driver::memory::{alloc, current, done};
use crate::backend::cuda::driver::stream::CudaStream;
use crate::backend::cuda::driver::timing;
use crate::backend::cuda::CudaBackend;
use crate::backend::same_length;
use crate::device_id::DeviceId;
use crate::element::DType;
use crate::error::{Error, Result};

/// Records `done` on `s` right after a copy that uses host memory was queued. If the
/// record fails the copy's end is unknown: wait for the stream instead, and if even that
/// fails call `retire`, which keeps the host memory from the host and from reuse for good.
fn marked(s: &CudaStream, done: &CudaEvent, retire: impl FnOnce()) -> Result<()> {
    let Err(e) = done.record(s) else { return Ok(()) };
    if s.synchronize().is_err() {
        retire();
    }
    Err(e)
}

fn foreign_stream(device: DeviceId, stream_ordinal: u32) -> Error {
    Error::DeviceMismatch { op: "copy_async", lhs: device, rhs: DeviceId::Cuda(stream_ordinal) }
}

pub(in crate::backend::cuda) fn upload_async(
    bk: &CudaBackend,
    device: DeviceId,
    src: &impl PinnedMemory,
    stream: &Arc<CudaStream>,
) -> Result<(CudaBuffer, Arc<CudaEvent>)> {
    let s = stream;
    let dev = bk.dev(device)?;
    if s.ordinal != dev.ordinal {
        return Err(foreign_stream(device, s.ordinal));
    }
    let out = CudaBuffer::alloc(dev, s, src.len())?;
    let done = Arc::new(CudaEvent::create(dev.ordinal, dev.ctx.cu_ctx(), false)?);
    if !src.bytes().is_empty() {
        let span = timing::begin(s);
        // `out` holds `src.bytes().len()` bytes on this device; `src` is
        // page-locked memory that stays allocated and unwritten until `done`
        // completes (dispatch holds it, or it is retired below if that cannot be known).
        // SAFETY: as said just above.
        let r = dma(|| unsafe { result::memcpy_htod_async(out.ptr(), src.bytes(), s.raw.0) })
            .map_err(driver(dev.ordinal, "cuMemcpyHtoDAsync"));
        timing::finish(span, s, &r, || timing::copy("HtoD", src.bytes().len(), "pinned"));
        r?;
    }
    out.mark_written();
    marked(s, &done, || src.retire())?;
    out.set_ready(Arc::clone(&done));
    Ok((out, done))
}

pub(in crate::backend::cuda) fn download_async(
    b: &CudaBuffer,
    dst: &mut impl PinnedMemory,
    stream: &Arc<CudaStream>,
) -> Result<Arc<CudaEvent>> {
    let s = stream;
    let dev = b.device();
    if s.ordinal != dev.ordinal {
        return Err(foreign_stream(dev.id(), s.ordinal));
    }
    b.use_on(s)?;
    let done = Arc::new(CudaEvent::create(dev.ordinal, dev.ctx.cu_ctx(), false)?);
    if b.bytes() > 0 {
        same_length("to_pinned_async", dst.len(), b.bytes())?;
        let span = timing::begin(s);
        // `dst` is a fresh page-locked buffer of the source's length that the
        // caller exposes only after `done` (a `Pending`); dispatch holds it from reuse
        // until then, or it is retired below if that cannot be known.
        // SAFETY: as said just above.
        let r = dma(|| unsafe { result::memcpy_dtoh_async(dst.bytes_mut(), b.ptr(), s.raw.0) })
            .map_err(driver(dev.ordinal, "cuMemcpyDtoHAsync"));
        timing::finish(span, s, &r, || timing::copy("DtoH", b.bytes(), "pinned"));
        r?;
    }
    marked(s, &done, || dst.retire())?;
    Ok(done)
}

pub(in crate::backend::cuda) fn upload(bk: &CudaBackend, device: DeviceId, data: &[u8]) -> Result<CudaBuffer> {
    let dev = bk.dev(device)?;
    let (s, out) = alloc(dev, DType::U8, data.len(), &[])?;
    dev.bind()?;
    // SAFETY: `out` holds exactly `data.len()` bytes of `dev`, allocated on `s` and
    // held until `done`, whose drop frees it on `s` after the copy; `dev`'s context is
    // current (bind above).
    unsafe { staged::upload(dev, &s, out.ptr(), data)? };
    done(out)
}

/// One new buffer per part on `device`, all written by one staged pass on the current
/// stream (a checkpoint's tensors: many parts, few large).
pub(in crate::backend::cuda) fn upload_parts(
    bk: &CudaBackend,
    device: DeviceId,
    parts: &[&[u8]],
) -> Result<Vec<CudaBuffer>> {
    let dev = bk.dev(device)?;
    let mut outs = Vec::with_capacity(parts.len());
    let mut s = None;
    for p in parts {
        let (stream, out) = alloc(dev, DType::U8, p.len(), &[])?;
        s = Some(stream);
        outs.push(out);
    }
    let Some(s) = s else { return Ok(Vec::new()) };
    dev.bind()?;
    let pieces: Vec<(u64, &[u8])> = outs.iter().zip(parts).map(|(o, p)| (o.ptr(), *p)).collect();
    // SAFETY: each `outs[i]` holds exactly `parts[i].len()` bytes of `dev`, allocated on
    // `s` (the current stream, the same for every `alloc` above) and held until `done`,
    // whose buffers are freed on `s` after the copy; `dev`'s context is current.
    unsafe { staged::upload_pieces(dev, &s, &pieces)? };
    outs.into_iter().map(done).collect()
}

pub(in crate::backend::cuda) fn download(b: &CudaBuffer, out: &mut [std::mem::MaybeUninit<u8>]) -> Result<()> {
    let dev = b.device();
    same_length("to_vec", out.len(), b.bytes())?;
    if out.is_empty() {
        return Ok(());
    }
    let s = current(dev);
    b.use_on(&s)?;
    dev.bind()?;
    // SAFETY: `b` holds exactly `out.len()` bytes of `dev` (checked above), is ready on
    // `s` (use_on above) and borrowed for this call, which returns only once the copy
    // is done; `dev`'s context is current (bind above).
    unsafe { staged::download(dev, &s, b.ptr(), out) }
}

pub(in crate::backend::cuda) fn copy(bk: &CudaBackend, b: &CudaBuffer, dst: DeviceId) -> Result<CudaBuffer> {
    let (from, bytes) = (b.device(), b.bytes());
    let to = bk.dev(dst)?;
    if std::ptr::eq(from, to) {
        let (s, out) = alloc(to, DType::U8, bytes, &[b])?;
        // SAFETY: `out` (new, on `s`) and `b` (ready on `s` and alive past the copy,
        // see `alloc`) both hold `bytes` bytes of this device, in distinct allocations.
        unsafe { CudaBackend::dtod(&s, out.ptr(), b.ptr(), bytes)? };
        return done(out);
    }
    let (s, out) = alloc(to, DType::U8, bytes, &[])?;
    if bytes == 0 {
        return done(out);
    }
    // Across devices: the copy waits for the source's writer, and the source's free
    // waits for the copy.
    let writer = b.writer();
    s.wait_for(&writer)?;
    to.bind()?;
    let span = timing::begin(&s);
    let (dst_ctx, src_ctx) = (to.ctx.cu_ctx(), from.ctx.cu_ctx());
    // `out` holds `bytes` bytes of `to`, allocated on `s`; `b` holds `bytes` bytes of `from`, and both
    // contexts are the devices' live primary contexts. `s` waited for `b`'s writer above, and `b`'s stream waits
    // for `s` below, so `b`'s free (ordered on its stream) comes after the copy; `out` is freed on `s`.
    // SAFETY: as said just above.
    let r = dma(|| unsafe { result::memcpy_peer_async(dst_ctx, out.ptr(), src_ctx, b.ptr(), bytes, s.raw.0) })
        .map_err(driver(to.ordinal, "cuMemcpyPeerAsync"));
    timing::finish(span, &s, &r, || timing::copy("peer", bytes, "peer"));
    r?;
    writer.wait_for(&s)?;
    done(out)
}

/// Copies `src` over `dst` (the same length, one device) in place on the current stream.
pub(in crate::backend::cuda) fn overwrite(dst: &CudaBuffer, src: &CudaBuffer) -> Result<()> {
    let dev = dst.device();
    if !std::ptr::eq(dev, src.device()) || dst.bytes() != src.bytes() {
        return Err(Error::InvalidArgument {
            op: "copy_from",
            reason: format!(
                "{} bytes on cuda:{} cannot overwrite {} bytes on cuda:{}",
                src.bytes(),
                src.device().ordinal,
                dst.bytes(),
                dev.ordinal
            ),
        });
    }
    let s = crate::backend::cuda::driver::memory::current(dev);
    dev.bind()?;
    src.use_on(&s)?;
    dst.before_write(&s)?;
    // Both buffers hold `bytes` bytes of this device and stay allocated past the copy
    // (their frees wait for `s`, a user of both); `s` waited for `src`'s writer and for
    // every use of `dst` since its last write (above); `after_write` orders later uses.
    // SAFETY: so; and they are distinct allocations (an input's memory is shared with no other tensor).
    unsafe { CudaBackend::dtod(&s, dst.ptr(), src.ptr(), dst.bytes())? };
    dst.after_write(&s)
}
