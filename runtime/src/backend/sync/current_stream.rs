//! The streams made current on each thread by `on_stream`: the state a backend reads to
//! pick the stream an op queues on. Each backend keeps a [`Current`] of its own stream
//! type in a thread-local (`dispatch` picks which when `on_stream` names a stream), so
//! no backend holds or checks another's streams.

use std::cell::RefCell;
use std::thread::LocalKey;

use crate::device_id::DeviceId;

/// Streams made current by `on_stream` on one thread, innermost last.
pub(crate) struct Current<S>(RefCell<Vec<(DeviceId, S)>>);

impl<S: Clone> Current<S> {
    pub(crate) const fn new() -> Self {
        Current(RefCell::new(Vec::new()))
    }

    /// The stream made current for `device`, if any (the innermost).
    pub(crate) fn of(&self, device: DeviceId) -> Option<S> {
        let c = self.0.borrow();
        if c.is_empty() {
            return None;
        }
        c.iter().rev().find(|(d, _)| *d == device).map(|(_, s)| s.clone())
    }
}

/// Runs `f` with `stream` current for `device` in `key`'s [`Current`] (what `on_stream`
/// does, untyped); restored on every exit, a panic included.
pub(crate) fn with_current<S: Clone + 'static, R>(
    key: &'static LocalKey<Current<S>>,
    device: DeviceId,
    stream: S,
    f: impl FnOnce() -> R,
) -> R {
    struct Pop<S: 'static>(&'static LocalKey<Current<S>>);
    impl<S> Drop for Pop<S> {
        fn drop(&mut self) {
            self.0.with(|c| c.0.borrow_mut().pop());
        }
    }
    key.with(|c| c.0.borrow_mut().push((device, stream)));
    let _pop = Pop(key);
    f()
}
