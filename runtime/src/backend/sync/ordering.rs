//! What a stream is already ordered after, so that a cross-stream use of a tensor waits
//! only when no earlier wait implies it.
//!
//! Every stream numbers the writes queued on it (`mark_write`). An event recorded on a
//! stream remembers the number reached at the record; a stream that waits for that event
//! is ordered after every write up to it (`note_wait`). A tensor written as write `n` of
//! stream `w` needs no new wait on stream `s` when `s` has waited for `w` at `n` or later
//! ([`Order::has_waited`]), or when `s` already waited for this very tensor (its readers).
//! Both backends keep these books the same way, so the host backend counts waits and
//! skips exactly as the GPU does.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

static SKIPPED: AtomicU64 = AtomicU64::new(0);

/// Counts a cross-stream use that needed no wait: an earlier wait already ordered it.
pub(crate) fn count_skipped() {
    SKIPPED.fetch_add(1, Ordering::Relaxed);
}

/// Cross-stream uses that needed no new wait, in this process.
pub(crate) fn skipped() -> u64 {
    SKIPPED.load(Ordering::Relaxed)
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A process-unique stream number (never reused, unlike addresses).
pub(crate) fn new_stream_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// The ordering books of one stream.
#[derive(Debug, Default)]
pub(crate) struct Order {
    /// Writes queued on this stream so far.
    writes: AtomicU64,
    /// For each other stream (by id), the last of its writes this stream has waited for.
    waited: Mutex<HashMap<u64, u64>>,
}

impl Order {
    /// Numbers a write just queued on this stream (from 1).
    pub(crate) fn mark_write(&self) -> u64 {
        self.writes.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// The number of the last write queued so far: read it before recording an event,
    /// so the event claims no write queued after the record.
    pub(crate) fn writes(&self) -> u64 {
        self.writes.load(Ordering::SeqCst)
    }

    /// This stream now waits for stream `writer` up to its write `upto`.
    pub(crate) fn note_wait(&self, writer: u64, upto: u64) {
        let mut w = self.waited.lock().unwrap_or_else(|p| p.into_inner());
        let at = w.entry(writer).or_insert(0);
        *at = (*at).max(upto);
    }

    /// Whether this stream is already ordered after write `n` of stream `writer`.
    pub(crate) fn has_waited(&self, writer: u64, n: u64) -> bool {
        n > 0 && self.waited.lock().unwrap_or_else(|p| p.into_inner()).get(&writer).is_some_and(|&at| at >= n)
    }
}

/// Where an event was recorded: the stream's id and how many of its writes precede it.
#[derive(Debug, Default)]
pub(crate) struct Mark {
    stream: AtomicU64,
    writes: AtomicU64,
}

impl Mark {
    /// Remembers a record on stream `id` after `writes` writes (read before the record).
    pub(crate) fn set(&self, id: u64, writes: u64) {
        self.writes.store(writes, Ordering::SeqCst);
        self.stream.store(id, Ordering::SeqCst);
    }

    /// The stream and write count of the last record, if the event was recorded.
    pub(crate) fn get(&self) -> Option<(u64, u64)> {
        let id = self.stream.load(Ordering::SeqCst);
        (id != 0).then(|| (id, self.writes.load(Ordering::SeqCst)))
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::sync::ordering::*;

    #[test]
    fn a_wait_covers_the_writes_before_its_mark_only() {
        let (w, s) = (Order::default(), Order::default());
        let first = w.mark_write();
        let mark = w.writes();
        let second = w.mark_write();
        s.note_wait(7, mark);
        assert!(s.has_waited(7, first));
        assert!(!s.has_waited(7, second), "a write after the event is not covered");
        assert!(!s.has_waited(8, first), "another stream's writes are not covered");
        assert!(!s.has_waited(7, 0), "an unnumbered write is never covered");
        s.note_wait(7, 1);
        assert!(s.has_waited(7, first), "an older wait does not undo a newer one");
    }
}
