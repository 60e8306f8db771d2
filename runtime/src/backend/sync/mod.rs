//! Ordering work between streams and the host: the streams `on_stream` made current
//! ([`current_stream`]), the books that decide when a cross-stream use needs a wait
//! ([`ordering`]), the host model's hazard checker ([`hazard`]) and its vector clock
//! ([`clock`]), the rules of work in a graph capture both backends follow
//! ([`capture`]), and what is known of a graph's index inputs between replays ([`checked`]).

pub(crate) mod capture;
pub(crate) mod checked;
pub(crate) mod clock;
pub(crate) mod current_stream;
pub(crate) mod hazard;
pub(crate) mod ordering;
pub(crate) mod uses;

use std::sync::atomic::{AtomicU64, Ordering};

static CROSS_STREAM_WAITS: AtomicU64 = AtomicU64::new(0);

/// Counts a wait inserted because a tensor was used on a stream other than its writer's.
pub(crate) fn count_cross_stream_wait() {
    CROSS_STREAM_WAITS.fetch_add(1, Ordering::Relaxed);
}

/// How many cross-stream waits locus has inserted in this process.
pub(crate) fn cross_stream_waits() -> u64 {
    CROSS_STREAM_WAITS.load(Ordering::Relaxed)
}

/// How many cross-stream uses needed no wait of their own (see [`ordering`]).
pub(crate) fn cross_stream_waits_skipped() -> u64 {
    ordering::skipped()
}
