//! The streams made current on each thread by `on_stream`: the state the backends read
//! to pick the stream an op queues on. Kept here, at the bottom, so that the backends
//! import nothing from the layers above them.

use std::cell::RefCell;

use crate::backend::AnyStream;
use crate::device_id::DeviceId;

thread_local! {
    /// Streams made current by `on_stream`, innermost last.
    static CURRENT: RefCell<Vec<(DeviceId, AnyStream)>> = const { RefCell::new(Vec::new()) };
}

/// The stream `on_stream` made current for `device` on this thread, if any.
pub(crate) fn current(device: DeviceId) -> Option<AnyStream> {
    CURRENT.with(|c| {
        let c = c.borrow();
        if c.is_empty() {
            return None;
        }
        c.iter().rev().find(|(d, _)| *d == device).map(|(_, s)| s.clone())
    })
}

/// Runs `f` with `stream` current for `device` (what `on_stream` does, untyped).
pub(crate) fn with_current<R>(device: DeviceId, stream: AnyStream, f: impl FnOnce() -> R) -> R {
    struct Pop;
    impl Drop for Pop {
        fn drop(&mut self) {
            CURRENT.with(|c| c.borrow_mut().pop());
        }
    }
    CURRENT.with(|c| c.borrow_mut().push((device, stream)));
    let _pop = Pop;
    f()
}
