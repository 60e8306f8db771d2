//! What a graph capture may record, decided in one place before anything reaches a
//! backend.
//!
//! While a thread captures (`Graph::capture` runs its closure inside [`enter`]), every
//! device-level call goes through the gate of [`crate::backend::AnyBackend`] ([`crate::backend::for_device`]
//! hands it out gated) and every
//! storage-level op of a [`crate::backend::Buffer`] asks [`on_device`] first. Work on the capture's
//! device queues on the capturing stream and is recorded; everything else is an
//! [`Error::NotCapturable`] naming the op: host reads and synchronizes (nothing runs
//! during a capture, so there is nothing to wait for), copies to or from host memory (a
//! replay would copy the same host bytes again), ops on another device, collectives, and
//! integer division (it reads back whether a divisor was zero).
//!
//! The backends add what only they can see: a captured op may read memory made in the
//! capture or the graph's inputs only (`begin_capture`), and a stream that waits for an
//! event recorded in the capture joins it (the rules both follow: `sync/capture.rs`).

use std::cell::Cell;

use crate::device_id::DeviceId;
use crate::element::DType;
use crate::error::{Error, Result};

thread_local! {
    /// The device this thread is capturing work of, if any.
    static ACTIVE: Cell<Option<DeviceId>> = const { Cell::new(None) };
}

/// While alive, the thread captures work of a device; restores the previous state on
/// drop. A forgotten guard leaves the thread capturing, which refuses more, never less.
pub(crate) struct Capturing {
    prev: Option<DeviceId>,
}

/// Marks this thread as capturing work of `device`.
pub(crate) fn enter(device: DeviceId) -> Capturing {
    Capturing { prev: ACTIVE.with(|a| a.replace(Some(device))) }
}

impl Drop for Capturing {
    fn drop(&mut self) {
        ACTIVE.with(|a| a.set(self.prev));
    }
}

/// The device this thread captures work of, if it does.
pub(crate) fn active() -> Option<DeviceId> {
    ACTIVE.with(Cell::get)
}

/// `op` cannot be captured, for `reason`: an error while this thread captures.
pub(crate) fn refuse(op: &'static str, reason: &str) -> Result<()> {
    match active() {
        Some(_) => Err(Error::NotCapturable { op, reason: reason.into() }),
        None => Ok(()),
    }
}

/// `op` on `device` may be captured: only work of the capture's device can be.
pub(crate) fn on_device(op: &'static str, device: DeviceId) -> Result<()> {
    match active() {
        Some(graph) if graph != device => Err(Error::NotCapturable {
            op,
            reason: format!(
                "it runs on {device}, and this graph captures work on {graph} only; \
                 capture the work of each device in a graph of its own"
            ),
        }),
        _ => Ok(()),
    }
}

/// Integer division reads back whether a divisor was zero: a host wait.
pub(crate) fn division(op: crate::backend::BinaryOp, dtype: DType) -> Result<()> {
    if op == crate::backend::BinaryOp::Div && !dtype.is_float() {
        return refuse(
            "integer division",
            "it reads back whether a divisor was zero, which waits on the host; divide floats in the graph, or divide integers outside it",
        );
    }
    Ok(())
}
