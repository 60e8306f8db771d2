//! The stream `on_stream` made current for a device on this thread, as the layers above
//! see it: each backend keeps its own (`sync::current_stream::Current`), and this picks
//! the one of the stream's backend.

use crate::backend::{cuda, host, AnyStream};
use crate::device_id::DeviceId;

/// The stream made current for `device` on this thread, if any.
pub(crate) fn current(device: DeviceId) -> Option<AnyStream> {
    host::current_of(device).map(AnyStream::Host).or_else(|| cuda::current_of(device).map(AnyStream::Cuda))
}

/// Runs `f` with `stream` current for `device` on this thread (what `on_stream` does,
/// untyped); restored on every exit, a panic included.
pub(crate) fn with_current<R>(device: DeviceId, stream: AnyStream, f: impl FnOnce() -> R) -> R {
    match stream {
        AnyStream::Host(s) => host::with_current(device, s, f),
        AnyStream::Cuda(s) => cuda::with_current(device, s, f),
    }
}
