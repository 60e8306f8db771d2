//! The hazard checker's vector clock ([`Clock`]).

/// For each agent (by key), the last of its operations ordered before some point.
///
/// Indexed by key: stream keys are small and dense (`ordering::new_stream_id` counts from
/// 1; the host is 0), so a join is one pass over two slices. Every op books and clones a
/// clock that grows with the streams the process ever made; as a hash map that cost most
/// of a debug build's time in tests that make thousands of streams (tests/faults.rs).
#[derive(Clone, Debug, Default)]
pub(crate) struct Clock(Vec<u64>);

impl Clock {
    pub(super) fn get(&self, agent: u64) -> u64 {
        usize::try_from(agent).ok().and_then(|i| self.0.get(i)).copied().unwrap_or(0)
    }

    pub(super) fn tick(&mut self, agent: u64, seq: u64) {
        let Ok(i) = usize::try_from(agent) else { return };
        if i >= self.0.len() {
            self.0.resize(i + 1, 0);
        }
        self.0[i] = self.0[i].max(seq);
    }

    pub(super) fn join(&mut self, other: &Clock) {
        if other.0.len() > self.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        for (at, &seq) in self.0.iter_mut().zip(&other.0) {
            if seq > *at {
                *at = seq;
            }
        }
    }
}
