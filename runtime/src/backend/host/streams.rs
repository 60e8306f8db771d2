//! The host backend's simulated streams and events: which stream is current, the
//! ordering books that count cross-stream waits as the cuda backend does, and events
//! that remember when and after which writes they were recorded.

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Instant;

use super::buffer::HostBuffer;
use crate::backend::ordering::{self, Mark, Order};
use crate::backend::{count_cross_stream_wait, Buffer, RawEvent, RawStream};
use crate::device::DeviceId;
use crate::error::{Error, Result};

/// The id of the simulated stream current for `device` on this thread (0: the default).
pub(super) fn current_stream(device: DeviceId) -> u64 {
    match crate::backend::current_stream::current(device) {
        Some(RawStream::Host { id, .. }) => id,
        _ => 0,
    }
}

/// The host memory of `b`, about to be read on the current stream.
pub(super) fn host_buf(b: &Buffer) -> Result<&HostBuffer> {
    let h = host_mem(b)?;
    use_on_stream(h, current_stream(h.account.device));
    Ok(h)
}

/// Books a use of `h` on simulated stream `on` as the cuda backend books its event
/// waits: none on the writer's stream, none when `on` already waited for `h` or for a
/// later write of the writer (counted as skipped), else one wait. Work on the host runs
/// at once, so the wait itself is only booked.
pub(super) fn use_on_stream(h: &HostBuffer, on: u64) {
    if h.stream == on {
        return;
    }
    let mut readers = h.readers.lock().unwrap_or_else(|p| p.into_inner());
    if readers.contains(&on) {
        ordering::count_skipped();
        return;
    }
    let device = h.account.device;
    let order = order_of(device, on);
    let writer = stream_key(device, h.stream);
    if order.has_waited(writer, h.written) {
        ordering::count_skipped();
    } else {
        order.note_wait(writer, h.written);
        count_cross_stream_wait();
    }
    readers.push(on);
}

/// A process-unique number for simulated stream `id` of `device` (default streams are
/// 0 on every device).
pub(super) fn stream_key(device: DeviceId, id: u64) -> u64 {
    let d = match device {
        DeviceId::Cpu => 0,
        DeviceId::Pinned => 1,
        DeviceId::Cuda(n) => 2 + n as u64,
    };
    (d << 48) | id
}

/// The ordering books of simulated stream `id` of `device`.
pub(super) fn order_of(device: DeviceId, id: u64) -> Arc<Order> {
    static ORDERS: LazyLock<Mutex<HashMap<u64, Arc<Order>>>> = LazyLock::new(Default::default);
    let mut m = ORDERS.lock().unwrap_or_else(|p| p.into_inner());
    Arc::clone(m.entry(stream_key(device, id)).or_default())
}

/// An event of the host backend: when it was recorded, and after which writes.
#[derive(Debug, Default)]
pub(crate) struct HostEvent {
    pub(super) at: Mutex<Option<Instant>>,
    pub(super) mark: Mark,
}

/// The host memory of `b`; device memory here is a caller's bug, reported, not a panic.
pub(super) fn host_mem(b: &Buffer) -> Result<&HostBuffer> {
    match b {
        Buffer::Host(h) => Ok(h),
        Buffer::Cuda(_) => Err(crate::backend::wrong_buffer("host", "cuda")),
    }
}

pub(super) fn stream_id(s: &RawStream) -> u64 {
    match s {
        RawStream::Host { id, .. } => *id,
        RawStream::Cuda(_) => 0,
    }
}

/// Runs `f` with `stream` as the current simulated stream of its device, so that what
/// `f` writes is owned by `stream`.
pub(super) fn on_host_stream<R>(stream: &RawStream, f: impl FnOnce() -> R) -> R {
    match stream {
        RawStream::Host { device, .. } => crate::backend::current_stream::with_current(*device, stream.clone(), f),
        RawStream::Cuda(_) => f(),
    }
}

pub(super) static NEXT_STREAM: AtomicU64 = AtomicU64::new(1);

pub(super) fn host_event(e: &RawEvent) -> Result<&HostEvent> {
    match e {
        RawEvent::Host(e) => Ok(e),
        RawEvent::Cuda(_) => {
            Err(Error::InvalidArgument { op: "event", reason: "a cuda event was handed to the host backend".into() })
        }
    }
}
