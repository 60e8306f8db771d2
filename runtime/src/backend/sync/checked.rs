//! What is known of a graph's index inputs between replays. A captured op that reads
//! indices from an input leaves an [`IndexRule`] (its capture checks it before each
//! replay, which waits for the input's writes, and so for the replay before them). When
//! the input was last written through `InputMut` and the indices were checked then, at
//! their source (which the graph does not write, so the check waits for nothing of it),
//! the verdict is kept here, and a replay whose every rule has one takes the verdicts
//! instead of checking: it queues behind the last replay without waiting for it.
//!
//! Keyed by device and address of the input, with the capture that made the rules: a
//! capture's rules go when it goes, and a new capture of the same memory starts afresh.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{LazyLock, Mutex, MutexGuard};

use crate::backend::sync::capture::IndexRule;
use crate::device_id::DeviceId;
use crate::error::Result;

struct Input {
    capture: u64,
    rules: Vec<IndexRule>,
    /// The check of the input's last write, when one was made at its source.
    verdict: Option<Result<()>>,
}

static INPUTS: LazyLock<Mutex<HashMap<(DeviceId, u64), Input>>> = LazyLock::new(|| Mutex::new(HashMap::new()));
static NEXT: AtomicU64 = AtomicU64::new(1);
static CHECKS: AtomicU64 = AtomicU64::new(0);

fn inputs() -> MutexGuard<'static, HashMap<(DeviceId, u64), Input>> {
    INPUTS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A new capture's key.
pub(crate) fn capture_id() -> u64 {
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The capture `capture` on `device` reads indices by `rule` (its input's verdict, if
/// any, is forgotten: the rules changed).
pub(crate) fn register(device: DeviceId, capture: u64, rule: IndexRule) {
    let mut m = inputs();
    let e = m.entry((device, rule.addr)).or_insert_with(|| Input { capture, rules: Vec::new(), verdict: None });
    if e.capture != capture {
        *e = Input { capture, rules: Vec::new(), verdict: None };
    }
    if !e.rules.contains(&rule) {
        e.rules.push(rule);
    }
    e.verdict = None;
}

/// The capture `capture` went: its inputs' rules and verdicts go with it.
pub(crate) fn unregister(device: DeviceId, capture: u64) {
    inputs().retain(|&(d, _), e| d != device || e.capture != capture);
}

/// The rules of the graph input at `addr` on `device`, in the capture's order.
pub(crate) fn rules_at(device: DeviceId, addr: u64) -> Vec<IndexRule> {
    inputs().get(&(device, addr)).map(|e| e.rules.clone()).unwrap_or_default()
}

/// Sets (or, with `None`, forgets) the verdict of the input at `addr`'s last write.
pub(crate) fn set_verdict(device: DeviceId, addr: u64, verdict: Option<Result<()>>) {
    if let Some(e) = inputs().get_mut(&(device, addr)) {
        e.verdict = verdict;
    }
}

/// When every rule's input has a verdict: the first error among them in the rules'
/// order, or `Ok`; `None` when one has none, and the replay checks them all (counted:
/// [`replay_checks`]).
pub(crate) fn verdicts(device: DeviceId, rules: &[IndexRule]) -> Option<Result<()>> {
    if rules.is_empty() {
        // A graph with no index inputs: nothing to look up, so no lock of the books.
        return Some(Ok(()));
    }
    let m = inputs();
    let mut first = Ok(());
    for r in rules {
        let Some(verdict) = m.get(&(device, r.addr)).and_then(|e| e.verdict.clone()) else {
            CHECKS.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        if let (Err(e), true) = (verdict, first.is_ok()) {
            first = Err(e);
        }
    }
    Some(first)
}

/// How many replays of graphs with index inputs checked those inputs on their device (a
/// wait for the inputs' writes, and so for the replays before them).
pub(crate) fn replay_checks() -> u64 {
    CHECKS.load(Ordering::Relaxed)
}
