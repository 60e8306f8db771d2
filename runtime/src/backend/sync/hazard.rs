//! The hazard checker of the host backend's asynchronous model: it reports, at the
//! moment the host or a stream is given memory to use, every use that nothing orders
//! after the previous conflicting one.
//!
//! Each agent (the host, and every simulated stream) has a vector clock ([`Clock`]):
//! for every other agent, the last of its operations known to come before. A stream's
//! clock takes the host's at each op queued on it (host work before a launch comes before
//! the launch), another stream's at each `wait_event`; the host's takes a stream's at a
//! synchronize, and an event's when a `sync_event` or a completed `event_done` observes
//! it. Every piece of memory has a [`Track`] of its last write and the reads since. A use
//! is a hazard when a conflicting earlier use (at least one of the two a write) is not
//! in the user's clock, so reports do not depend on timing: a missing wait is found even
//! when the work happened to finish first. The checks cover:
//!
//! - host code reading or writing memory that queued stream work still uses
//!   ([`host_use`]);
//! - memory freed, or handed out again by the pinned pool, while queued work may still
//!   use it ([`freed`], [`reused`]);
//! - a stream using memory whose last write is on another stream, with no event ordering
//!   the two ([`stream_op`]).
//!
//! A report panics with a message naming the op, the memory (size, type where known,
//! device) and both agents: in a test that is a failure with that message. The checker
//! is on in debug builds unless `LOCUS_HAZARD_CHECK=0`; in release builds [`enabled`] is
//! a constant `false` and every entry point returns at once.

use std::collections::HashMap;
use std::fmt;
use std::sync::{LazyLock, Mutex};

pub(crate) use crate::backend::sync::clock::Clock;
use crate::device_id::DeviceId;
use crate::element::DType;

/// Whether the checker runs: debug builds, unless `LOCUS_HAZARD_CHECK` is `0` or `off`.
pub(crate) fn enabled() -> bool {
    static ON: LazyLock<bool> = LazyLock::new(|| asked_for(std::env::var("LOCUS_HAZARD_CHECK").ok().as_deref()));
    cfg!(debug_assertions) && *ON
}

/// `LOCUS_HAZARD_CHECK` (`None`: unset) leaves the checker on unless it is `0`, `off` or `false`.
fn asked_for(v: Option<&str>) -> bool {
    !matches!(v.map(str::trim), Some("0" | "off" | "false"))
}

/// The host's component of every clock.
const HOST: u64 = 0;

/// Who uses memory: the host, or one simulated stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Agent {
    /// Code on the host (any thread).
    Host,
    /// A stream: its process-unique key, device and number on the device (0: default).
    Stream { key: u64, device: DeviceId, id: u64 },
}

impl Agent {
    fn key(self) -> u64 {
        match self {
            Agent::Host => HOST,
            Agent::Stream { key, .. } => key,
        }
    }
}

impl fmt::Display for Agent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Agent::Host => write!(f, "the host"),
            Agent::Stream { device, id: 0, .. } => write!(f, "the default stream of {device}"),
            Agent::Stream { device, id, .. } => write!(f, "stream {id} of {device}"),
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Access {
    agent: Agent,
    seq: u64,
    op: &'static str,
}

/// The uses of one piece of memory the checker still needs: the last write and the
/// reads after it.
#[derive(Debug, Default)]
pub(crate) struct Track(Mutex<Uses>);

#[derive(Debug, Default)]
struct Uses {
    write: Option<Access>,
    reads: Vec<Access>,
}

/// Memory as a report names it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Region<'a> {
    pub track: &'a Track,
    pub device: DeviceId,
    pub bytes: usize,
    /// The element type, where the op knows it.
    pub dtype: Option<DType>,
}

impl fmt::Display for Region<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.dtype {
            Some(t) if t.size() > 0 => write!(f, "{} memory [{t} × {}]", self.device, self.bytes / t.size()),
            _ => write!(f, "{} memory [{} bytes]", self.device, self.bytes),
        }
    }
}

/// Read or write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Read,
    Write,
}

#[derive(Default)]
struct Clocks {
    host: Clock,
    host_seq: u64,
    streams: HashMap<u64, Clock>,
}

static CLOCKS: LazyLock<Mutex<Clocks>> = LazyLock::new(Default::default);

fn clocks() -> std::sync::MutexGuard<'static, Clocks> {
    CLOCKS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The earlier uses of `track` that `clock` does not order before a `kind` use by `by`.
fn unordered(track: &Track, by: Agent, clock: &Clock, kind: Kind) -> Vec<(Access, Kind)> {
    let uses = track.0.lock().unwrap_or_else(|p| p.into_inner());
    let missed = |a: &&Access| a.agent != by && clock.get(a.agent.key()) < a.seq;
    let mut out: Vec<(Access, Kind)> = uses.write.iter().filter(missed).map(|a| (*a, Kind::Write)).collect();
    if kind == Kind::Write {
        out.extend(uses.reads.iter().filter(missed).map(|a| (*a, Kind::Read)));
    }
    out
}

fn record(track: &Track, access: Access, kind: Kind) {
    let mut uses = track.0.lock().unwrap_or_else(|p| p.into_inner());
    match kind {
        Kind::Write => {
            uses.write = Some(access);
            uses.reads.clear();
        }
        Kind::Read => match uses.reads.iter_mut().find(|r| r.agent == access.agent) {
            Some(r) => *r = access,
            None => uses.reads.push(access),
        },
    }
}

fn verb(kind: Kind) -> &'static str {
    match kind {
        Kind::Read => "reads",
        Kind::Write => "writes",
    }
}

fn report(mut problems: Vec<String>) {
    if problems.is_empty() || std::thread::panicking() {
        return;
    }
    // An op that uses one buffer twice (`x.matmul(&x)`) finds its hazard twice.
    problems.dedup();
    panic!("locus hazard: {}", problems.join("; "));
}

/// Books op `op`, queued as operation `seq` of stream `stream`, which uses `uses`; reports
/// every use that the stream is not ordered after. Returns the stream's clock after the
/// op, which an event recorded right after it carries.
pub(crate) fn stream_op(stream: Agent, seq: u64, op: &'static str, uses: &[(Region<'_>, Kind)]) -> Clock {
    let mut problems = Vec::new();
    let clock = {
        let mut c = clocks();
        let host = c.host.clone();
        let own = c.streams.entry(stream.key()).or_default();
        own.join(&host);
        own.tick(stream.key(), seq);
        let clock = own.clone();
        // Empty memory has nothing to race on.
        for (region, kind) in uses.iter().filter(|(r, _)| r.bytes > 0) {
            for (earlier, how) in unordered(region.track, stream, &clock, *kind) {
                problems.push(format!(
                    "`{op}` on {stream} {} {region} that `{}` on {} {}, with no event ordering the two",
                    verb(*kind),
                    earlier.op,
                    earlier.agent,
                    verb(how),
                ));
            }
            record(region.track, Access { agent: stream, seq, op }, *kind);
        }
        clock
    };
    report(problems);
    clock
}

/// Books a use of `region` by host code (`op` names it) and reports queued stream work
/// that may still use it, with no synchronize or completed event in between.
pub(crate) fn host_use(region: Region<'_>, kind: Kind, op: &'static str) {
    let mut problems = Vec::new();
    {
        let mut c = clocks();
        c.host_seq += 1;
        let seq = c.host_seq;
        c.host.tick(HOST, seq);
        for (earlier, how) in unordered(region.track, Agent::Host, &c.host, kind) {
            problems.push(format!(
                "host code ({op}) {} {region} that `{}` queued on {} {}: no synchronize or completed event \
                 in between",
                verb(kind),
                earlier.op,
                earlier.agent,
                verb(how),
            ));
        }
        record(region.track, Access { agent: Agent::Host, seq, op }, kind);
    }
    report(problems);
}

/// The pinned pool hands out `region` again: every stream use of it must be over, as
/// far as the host has observed (the block's events completed).
pub(crate) fn reused(region: Region<'_>) {
    let problems: Vec<String> = {
        let c = clocks();
        unordered(region.track, Agent::Host, &c.host, Kind::Write)
            .into_iter()
            .filter(|(a, _)| a.agent != Agent::Host)
            .map(|(a, _)| {
                format!(
                    "the pinned pool handed out {region} again while `{}` queued on {} may still use it",
                    a.op, a.agent
                )
            })
            .collect()
    };
    report(problems);
}

/// `region`, owned by stream `owner`, is freed (stream-ordered on `owner`, after it
/// waited for the streams in `readers`); reports stream uses the free is not ordered
/// after. Host uses are over: the host is the one freeing.
pub(crate) fn freed(region: Region<'_>, owner: Agent, readers: &[Agent]) {
    let problems: Vec<String> = {
        let mut c = clocks();
        let waited: Vec<Clock> = readers.iter().map(|r| c.streams.get(&r.key()).cloned().unwrap_or_default()).collect();
        let own = c.streams.entry(owner.key()).or_default();
        for w in &waited {
            own.join(w);
        }
        let own = own.clone();
        unordered(region.track, owner, &own, Kind::Write)
            .into_iter()
            .filter(|(a, _)| a.agent != Agent::Host)
            .map(|(a, _)| {
                format!(
                    "{region} of {owner} was freed while `{}` queued on {} may still use it: the free is not \
                     ordered after that use (no record of the stream's use)",
                    a.op, a.agent
                )
            })
            .collect()
    };
    report(problems);
}

/// Stream `stream` now waits for everything `clock` covers (a `wait_event`).
pub(crate) fn stream_waits(stream: Agent, clock: &Clock) {
    clocks().streams.entry(stream.key()).or_default().join(clock);
}

/// The host has observed everything `clock` covers (a synchronize, or a completed event).
pub(crate) fn host_waits(clock: &Clock) {
    clocks().host.join(clock);
}

/// The clock of `stream` now: what a synchronize of it makes the host wait for, and the
/// number of its last booked op (0 when none).
pub(crate) fn stream_clock(stream: Agent) -> (Clock, u64) {
    let c = clocks();
    let clock = c.streams.get(&stream.key()).cloned().unwrap_or_default();
    let seq = clock.get(stream.key());
    (clock, seq)
}

#[cfg(test)]
mod tests {
    use crate::backend::sync::hazard::*;

    #[test]
    fn hazard_check_values_never_panic_and_only_the_off_words_turn_it_off() {
        let values = crate::env_fuzz::values(0x4841_5a44, &["0", "off", "false", "1"], crate::env_fuzz::CASES);
        let n = crate::env_fuzz::run("LOCUS_HAZARD_CHECK", &values, |v| {
            assert_eq!(asked_for(Some(v)), !["0", "off", "false"].contains(&v.trim()), "`{v}`");
        });
        assert!(n >= 4000 && asked_for(None) && !asked_for(Some(" off\n")), "{n} values");
    }

    /// A stream agent numbered `id` on cuda:0, with a key no other stream of the process has.
    fn agent(id: u64) -> Agent {
        Agent::Stream { key: crate::backend::sync::ordering::new_stream_id(), device: DeviceId::Cuda(0), id }
    }

    fn region(track: &Track) -> Region<'_> {
        Region { track, device: DeviceId::Cuda(0), bytes: 16, dtype: Some(DType::F32) }
    }

    fn panics(f: impl FnOnce()) -> String {
        let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("the checker must report");
        e.downcast_ref::<String>().cloned().unwrap_or_default()
    }

    #[test]
    fn a_read_on_another_stream_needs_an_event_after_the_write() {
        let t = Track::default();
        let (w, r) = (agent(1), agent(2));
        let after_write = stream_op(w, 1, "fill", &[(region(&t), Kind::Write)]);
        let msg = panics(|| {
            stream_op(r, 1, "add", &[(region(&t), Kind::Read)]);
        });
        assert!(msg.contains("`add` on stream 2 of cuda:0 reads cuda:0 memory [f32 × 4]"), "{msg}");
        assert!(msg.contains("that `fill` on stream 1 of cuda:0 writes"), "{msg}");
        // With the event's clock joined, the same read is ordered.
        stream_waits(r, &after_write);
        stream_op(r, 2, "add", &[(region(&t), Kind::Read)]);
    }

    #[test]
    fn the_host_writes_only_after_it_observed_the_stream_reads() {
        let t = Track::default();
        let s = agent(3);
        let clock = stream_op(s, 1, "upload", &[(region(&t), Kind::Read)]);
        let msg = panics(|| host_use(region(&t), Kind::Write, "as_mut_slice"));
        assert!(msg.contains("host code (as_mut_slice) writes"), "{msg}");
        assert!(msg.contains("that `upload` queued on stream 3 of cuda:0 reads"), "{msg}");
        host_waits(&clock);
        host_use(region(&t), Kind::Write, "as_mut_slice");
        // A host read after a host write is program order.
        host_use(region(&t), Kind::Read, "as_slice");
    }

    #[test]
    fn a_free_must_come_after_every_stream_use() {
        let t = Track::default();
        let (owner, other) = (agent(4), agent(5));
        stream_op(owner, 1, "fill", &[(region(&t), Kind::Write)]);
        let after = stream_op(owner, 2, "record", &[]);
        stream_waits(other, &after);
        stream_op(other, 1, "relu", &[(region(&t), Kind::Read)]);
        let msg = panics(|| freed(region(&t), owner, &[]));
        assert!(msg.contains("freed while `relu` queued on stream 5 of cuda:0"), "{msg}");
        freed(region(&t), owner, &[other]);
    }

    #[test]
    fn a_reused_pinned_block_must_be_idle() {
        let t = Track::default();
        let s = agent(6);
        let clock = stream_op(s, 1, "download", &[(region(&t), Kind::Write)]);
        let msg = panics(|| reused(region(&t)));
        assert!(msg.contains("pinned pool handed out"), "{msg}");
        host_waits(&clock);
        reused(region(&t));
    }
}
