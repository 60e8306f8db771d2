//! The rules both backends follow for work of a graph capture: which capture a stream
//! joins when it waits for captured work, and the errors of a capture's misuse, worded
//! the same on both.

use std::sync::{Arc, Weak};

use crate::error::{Error, Result};

/// The rule of both backends for a stream that waits for work of a capture (an event
/// recorded in it, or a stream in it): `theirs` is that capture (`None`: the work is not
/// captured), `mine` the capture the waiting stream is in. The capture the stream must
/// join, if any: waiting for an ended capture, or from another one, is an error.
pub(crate) fn joining<C>(
    theirs: Option<Weak<C>>,
    mine: Option<Arc<C>>,
    ended: impl Fn(&C) -> bool,
) -> Result<Option<Arc<C>>> {
    let Some(theirs) = theirs else { return Ok(None) };
    let theirs = match theirs.upgrade() {
        Some(c) if !ended(&c) => c,
        _ => return Err(event_of_ended_capture()),
    };
    match mine {
        Some(mine) if Arc::ptr_eq(&mine, &theirs) => Ok(None),
        Some(_) => Err(Error::NotCapturable {
            op: "wait_event",
            reason: "the stream is captured into another graph; one capture cannot wait for another".into(),
        }),
        None => Ok(Some(theirs)),
    }
}

/// A captured op read memory that is neither an input nor made in the capture.
pub(crate) fn not_an_input() -> Error {
    Error::NotCapturable {
        op: "reading a tensor",
        reason: "the tensor is neither an input of the graph nor made in the capture, and a replay could outlive it; \
                 pass it in the graph's inputs"
            .into(),
    }
}

/// An event recorded in a capture, used outside it.
pub(crate) fn event_of_ended_capture() -> Error {
    Error::InvalidArgument {
        op: "event",
        reason: "the event was recorded during a graph capture: it marks a point of the graph, not of a stream, \
                 and nothing outside the capture can wait for it; record an event after `replay()` instead"
            .into(),
    }
}

/// A stream forked in a capture was not joined back before it ended.
pub(crate) fn unjoined() -> Error {
    Error::InvalidArgument {
        op: "Graph::capture",
        reason: "a stream that joined the capture (it waited for one of its events) has work the capturing stream \
                 never waited for; record an event on it and make the capturing stream wait for it before the \
                 capture ends"
            .into(),
    }
}
