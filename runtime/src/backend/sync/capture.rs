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

/// Indices a captured op reads from an input of the graph, which the host cannot check
/// during the capture (nothing runs) and so checks before every replay: the first
/// `count` i32 at the start of the input at `addr` must lie in `[0, bound)`. A replay
/// with one out of range is the error the op gives eagerly, and the graph does not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IndexRule {
    pub addr: u64,
    pub count: usize,
    pub of: Indexed,
}

/// What a rule's indices pick: rows of an `index_select`, or the classes of a
/// cross-entropy's targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Indexed {
    Rows(crate::backend::Gather),
    Classes(usize),
}

impl IndexRule {
    /// The op that reads the indices.
    pub(crate) fn op(&self) -> &'static str {
        match self.of {
            Indexed::Rows(_) => "index_select",
            Indexed::Classes(_) => "cross_entropy",
        }
    }

    /// The indices' upper bound (exclusive).
    pub(crate) fn bound(&self) -> usize {
        match self.of {
            Indexed::Rows(g) => g.size,
            Indexed::Classes(c) => c,
        }
    }

    /// The op's own error for `value`, found at position `at`.
    pub(crate) fn error(&self, at: usize, value: i64) -> Error {
        match self.of {
            Indexed::Rows(g) => g.out_of_range(at, value),
            Indexed::Classes(c) => crate::backend::bad_target(at, value, c),
        }
    }

    /// The first index out of range among the rule's, read from `indices` (the bytes of
    /// its input, i32 in native order), as the op's error.
    pub(crate) fn check(&self, indices: &[u8]) -> Result<()> {
        match self.first_bad(indices) {
            Some((at, t)) => Err(self.error(at, t.into())),
            None => Ok(()),
        }
    }

    /// The position and value of the first index out of range in `indices`, if any.
    pub(crate) fn first_bad(&self, indices: &[u8]) -> Option<(usize, i32)> {
        let bound = self.bound();
        let values = indices.chunks_exact(4).take(self.count).map(|b| i32::from_ne_bytes([b[0], b[1], b[2], b[3]]));
        values.enumerate().find(|&(_, t)| t < 0 || t as usize >= bound)
    }

    /// A rule of `count` indices below `bound` at `addr` (a source's check, whose errors
    /// the input's own rules word).
    pub(crate) fn limit(addr: u64, (count, bound): (usize, usize)) -> IndexRule {
        IndexRule { addr, count, of: Indexed::Classes(bound) }
    }
}

/// A captured index op whose indices were computed in the capture: they do not exist
/// until a replay, so nothing can check them before it.
pub(crate) fn computed_indices(op: &'static str) -> Error {
    Error::NotCapturable {
        op,
        reason: "its indices are computed in the capture, and an index is checked before each replay, which needs \
                 it to exist; pass the indices (i32, contiguous) in the graph's inputs"
            .into(),
    }
}
