//! Fault injection (issue 38): failures made on purpose at the points where the backends,
//! the files and the peers can really fail, so that tests see every error path run.
//!
//! A plan names points and when each fails: `LOCUS_FAULTS` when the backend starts, or
//! [`inject`] at any time. Its grammar, items separated by `,` or `;`:
//!
//! - `seed=N`: the seed of the rates below (0 when not given);
//! - `POINT=R` with `R` in `0..=1`: each call at `POINT` fails with probability `R`,
//!   decided by a hash of the seed, the point and the call's number, so a seed and a
//!   call number reproduce a failure exactly;
//! - `POINT=@N` (more than one: `@N@M`): the `N`th call at `POINT` fails (counted from 1
//!   after the plan is set);
//! - `POINT` is one of [`Point::NAMES`].
//!
//! A failure takes the path a real one takes: the cuda backend hands the driver, cuBLAS
//! or NCCL call's own error type back with a code the call can return (out of memory for
//! allocations and stream creation, launch out of resources for launches, and so on), the
//! host backend the error its simulation gives, files an `io::Error`. Each error says it
//! was injected and which call it was ([`note`]).
//!
//! Off, a point costs one relaxed atomic load.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Mutex, OnceLock};

/// A place where work can fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Point {
    /// A device memory allocation.
    Alloc,
    /// A page-locked host allocation.
    Pinned,
    /// A kernel launch or a library call that runs kernels (cuBLAS).
    Launch,
    /// A copy between host and device or two devices.
    Copy,
    /// An event recorded on a stream.
    Record,
    /// A stream waiting for an event, or the host waiting for a stream or event.
    Wait,
    /// A stream created.
    NewStream,
    /// A collective (NCCL, the host backend's, or a process group's over TCP).
    Collective,
    /// A file read (checkpoints).
    Read,
    /// A file written (checkpoints).
    Write,
}

const POINTS: usize = 10;

impl Point {
    /// Every point, in the order of [`Point::NAMES`].
    pub const ALL: [Point; POINTS] = [
        Point::Alloc,
        Point::Pinned,
        Point::Launch,
        Point::Copy,
        Point::Record,
        Point::Wait,
        Point::NewStream,
        Point::Collective,
        Point::Read,
        Point::Write,
    ];

    /// The names a plan uses.
    pub const NAMES: [&'static str; POINTS] =
        ["alloc", "pinned", "launch", "copy", "record", "wait", "stream", "collective", "read", "write"];

    /// The point's name in a plan.
    pub fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }

    fn parse(name: &str) -> Option<Point> {
        Self::NAMES.iter().position(|n| *n == name).map(|i| Self::ALL[i])
    }
}

impl std::fmt::Display for Point {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// When one point fails.
#[derive(Clone, Debug, Default, PartialEq)]
struct Rule {
    rate: f64,
    at: Vec<u64>,
}

/// A parsed plan.
#[derive(Clone, Debug, Default, PartialEq)]
struct Plan {
    seed: u64,
    rules: [Option<Rule>; POINTS],
}

/// Whether a plan is set: [`UNREAD`] until `LOCUS_FAULTS` is read (at the first point,
/// plan or backend start), then [`OFF`] or [`ARMED`] (the one load a point pays when off).
static STATE: AtomicU8 = AtomicU8::new(UNREAD);
const UNREAD: u8 = 0;
const OFF: u8 = 1;
const ARMED: u8 = 2;
/// The outcome of reading `LOCUS_FAULTS`, once.
static ENV: OnceLock<std::result::Result<(), String>> = OnceLock::new();
static PLAN: Mutex<Option<Plan>> = Mutex::new(None);
/// Calls seen at each point since the plan was set, and failures made.
static CALLS: [AtomicU64; POINTS] = [const { AtomicU64::new(0) }; POINTS];
static FAILED: [AtomicU64; POINTS] = [const { AtomicU64::new(0) }; POINTS];
/// Every failure made since the plan was set, in order (the first 4096).
static LOG: Mutex<Vec<Fault>> = Mutex::new(Vec::new());
const LOG_MAX: usize = 4096;

thread_local! {
    /// The last failure made on this thread, until an error message takes it.
    static LAST: RefCell<Option<Fault>> = const { RefCell::new(None) };
}

/// One failure made: the point, the call's number there, and the plan's seed. Together
/// they reproduce it: `LOCUS_FAULTS=seed=S,POINT=@N`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Where.
    pub point: Point,
    /// The call's number at `point` (from 1).
    pub call: u64,
    /// The plan's seed.
    pub seed: u64,
}

impl Fault {
    /// The plan that makes this failure alone.
    pub fn reproduction(&self) -> String {
        format!("seed={},{}=@{}", self.seed, self.point, self.call)
    }
}

impl std::fmt::Display for Fault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "injected by LOCUS_FAULTS: {} call {} (alone: LOCUS_FAULTS={})",
            self.point,
            self.call,
            self.reproduction()
        )
    }
}

/// Calls and failures at each point since the plan was set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Calls seen, by point (in [`Point::ALL`] order).
    pub calls: [u64; POINTS],
    /// Failures made, by point.
    pub failed: [u64; POINTS],
}

impl Counts {
    /// Calls seen at `p`.
    pub fn calls(&self, p: Point) -> u64 {
        self.calls[p as usize]
    }

    /// Failures made at `p`.
    pub fn failed(&self, p: Point) -> u64 {
        self.failed[p as usize]
    }

    /// Failures made at every point.
    pub fn total_failed(&self) -> u64 {
        self.failed.iter().sum()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn parse(spec: &str) -> std::result::Result<Plan, String> {
    let mut plan = Plan::default();
    for item in spec.split([',', ';']).map(str::trim).filter(|s| !s.is_empty()) {
        let Some((key, value)) = item.split_once('=') else {
            return Err(format!("`{item}` is not `POINT=RATE`, `POINT=@CALL` or `seed=N`"));
        };
        let (key, value) = (key.trim(), value.trim());
        if key == "seed" {
            plan.seed = value.parse().map_err(|_| format!("seed `{value}` is not a whole number below 2^64"))?;
            continue;
        }
        let Some(point) = Point::parse(key) else {
            return Err(format!("`{key}` is not a fault point; the points are {}", Point::NAMES.join(", ")));
        };
        let rule = plan.rules[point as usize].get_or_insert_with(Rule::default);
        if let Some(calls) = value.strip_prefix('@') {
            for c in calls.split('@') {
                let n: u64 = c.trim().parse().map_err(|_| format!("{key}: call `{c}` is not a whole number"))?;
                if n == 0 {
                    return Err(format!("{key}: calls are counted from 1"));
                }
                if rule.at.len() >= 1024 {
                    return Err(format!("{key}: at most 1024 calls may be named"));
                }
                rule.at.push(n);
            }
        } else {
            let r: f64 = value.parse().map_err(|_| format!("{key}: rate `{value}` is not a number"))?;
            if !(0.0..=1.0).contains(&r) {
                return Err(format!("{key}: rate {value} is not in 0..=1"));
            }
            rule.rate = r;
        }
    }
    Ok(plan)
}

/// Sets the plan `spec` (see the module's docs), replacing any other, with every count
/// at zero. An empty plan turns injection off.
pub fn inject(spec: &str) -> crate::error::Result<()> {
    let _ = from_env();
    let plan = parse(spec).map_err(|reason| crate::error::Error::InvalidArgument { op: "faults::inject", reason })?;
    set(plan);
    Ok(())
}

/// Sets the plan of `LOCUS_FAULTS`, once: when the backend starts (which reports a plan
/// that does not parse), or at the first point reached before (host-only programs).
pub(crate) fn start_from_env() -> std::result::Result<(), String> {
    from_env().clone()
}

fn from_env() -> &'static std::result::Result<(), String> {
    ENV.get_or_init(|| {
        let read = match std::env::var("LOCUS_FAULTS") {
            Ok(spec) => parse(&spec).map_err(|e| format!("LOCUS_FAULTS: {e}")),
            Err(std::env::VarError::NotPresent) => Ok(Plan::default()),
            Err(std::env::VarError::NotUnicode(_)) => Err("LOCUS_FAULTS is not unicode".into()),
        };
        let plan = read.as_ref().cloned().unwrap_or_default();
        set(plan);
        read.map(drop)
    })
}

/// Checks `value` as `LOCUS_FAULTS` would read it (for the environment fuzz test).
#[cfg(test)]
pub(crate) fn check_spec(value: &str) -> std::result::Result<(), String> {
    parse(value).map(drop)
}

fn set(plan: Plan) {
    let mut slot = lock(&PLAN);
    STATE.store(OFF, Ordering::SeqCst);
    for i in 0..POINTS {
        CALLS[i].store(0, Ordering::SeqCst);
        FAILED[i].store(0, Ordering::SeqCst);
    }
    lock(&LOG).clear();
    let any = plan.rules.iter().any(Option::is_some);
    *slot = any.then_some(plan);
    STATE.store(if any { ARMED } else { OFF }, Ordering::SeqCst);
}

/// Turns injection off.
pub fn clear() {
    let _ = from_env();
    set(Plan::default());
}

/// Calls and failures at each point since the plan was set.
pub fn counts() -> Counts {
    let mut c = Counts::default();
    for i in 0..POINTS {
        c.calls[i] = CALLS[i].load(Ordering::SeqCst);
        c.failed[i] = FAILED[i].load(Ordering::SeqCst);
    }
    c
}

/// Every failure made since the plan was set (the first 4096), in the order made.
pub fn made() -> Vec<Fault> {
    lock(&LOG).clone()
}

/// Counts one call at `point`; whether the plan makes it fail.
#[inline]
pub(crate) fn fails(point: Point) -> Option<Fault> {
    // Inlined into every gated driver call: with no plan, one load and no call.
    match STATE.load(Ordering::Relaxed) {
        OFF => None,
        _ => fails_planned(point),
    }
}

/// [`fails`] once a plan may be armed (or the environment is not read yet).
#[cold]
fn fails_planned(point: Point) -> Option<Fault> {
    if STATE.load(Ordering::Relaxed) == UNREAD && (from_env().is_err() || STATE.load(Ordering::SeqCst) != ARMED) {
        return None;
    }
    // A note of an earlier failure that no error took (one absorbed by a retry) must not
    // be said of a later, real error: each point reached replaces it.
    LAST.with(|l| l.borrow_mut().take());
    let call = CALLS[point as usize].fetch_add(1, Ordering::SeqCst) + 1;
    let seed = {
        let plan = lock(&PLAN);
        let plan = plan.as_ref()?;
        let rule = plan.rules[point as usize].as_ref()?;
        let hit = rule.at.contains(&call) || (rule.rate > 0.0 && unit(plan.seed, point, call) < rule.rate);
        if !hit {
            return None;
        }
        plan.seed
    };
    FAILED[point as usize].fetch_add(1, Ordering::SeqCst);
    let fault = Fault { point, call, seed };
    let mut log = lock(&LOG);
    if log.len() < LOG_MAX {
        log.push(fault);
    }
    drop(log);
    LAST.with(|l| *l.borrow_mut() = Some(fault));
    Some(fault)
}

/// What an error made on this thread just now should add: the failure injected there,
/// if any (taken, so that it is said once).
pub(crate) fn note() -> Option<Fault> {
    LAST.with(|l| l.borrow_mut().take())
}

/// The error of a call at `point` on `device` that the plan fails, as the driver's would
/// be (`call` is the call's name); `Ok` when it does not fail it.
pub(crate) fn check(point: Point, device: crate::device_id::DeviceId, call: &'static str) -> crate::error::Result<()> {
    match fails(point) {
        Some(f) => {
            note();
            Err(crate::error::Error::Driver { device, call, code: f.to_string() })
        }
        None => Ok(()),
    }
}

/// `call()`, unless the plan fails this call at `point`: then `Err(failed())`, an error
/// the real call can return, which goes where the real one would (the error's message
/// adds the [`note`]).
pub(crate) fn gate<T, E>(
    point: Point,
    failed: impl FnOnce() -> E,
    call: impl FnOnce() -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    match fails(point) {
        Some(_) => Err(failed()),
        None => call(),
    }
}

/// `code` with the failure injected on this thread just now, if any, said after it.
pub(crate) fn noted(code: String) -> String {
    match note() {
        Some(f) => format!("{code} ({f})"),
        None => code,
    }
}

/// `Err` with an `io::Error` if the plan fails this call at `point` (file points).
pub(crate) fn io(point: Point) -> std::io::Result<()> {
    match fails(point) {
        Some(f) => {
            note();
            Err(std::io::Error::other(f.to_string()))
        }
        None => Ok(()),
    }
}

/// A number in `[0, 1)` from the seed, the point and the call (splitmix64).
fn unit(seed: u64, point: Point, call: u64) -> f64 {
    let mut z = seed ^ (point as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ call.wrapping_mul(0xd1b5_4a32_d192_ed03);
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_parse_and_bad_ones_say_why() {
        let p = parse("seed=7, launch=@3@5; copy=0.25").unwrap();
        assert_eq!(p.seed, 7);
        assert_eq!(p.rules[Point::Launch as usize], Some(Rule { rate: 0.0, at: vec![3, 5] }));
        assert_eq!(p.rules[Point::Copy as usize], Some(Rule { rate: 0.25, at: vec![] }));
        assert!(parse("").unwrap().rules.iter().all(Option::is_none));
        for (bad, says) in [
            ("launch", "is not `POINT=RATE`"),
            ("lunch=0.1", "not a fault point"),
            ("copy=1.5", "not in 0..=1"),
            ("copy=NaN", "not in 0..=1"),
            ("copy=@0", "counted from 1"),
            ("copy=@x", "not a whole number"),
            ("seed=-1", "seed"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn rates_are_reproducible_and_near_their_value() {
        let hits = (1..=100_000).filter(|&c| unit(3, Point::Copy, c) < 0.1).count();
        assert!((9_000..11_000).contains(&hits), "{hits}");
        assert_eq!(unit(3, Point::Copy, 17), unit(3, Point::Copy, 17));
        assert_ne!(unit(3, Point::Copy, 17), unit(4, Point::Copy, 17));
        assert_ne!(unit(3, Point::Copy, 17), unit(3, Point::Alloc, 17));
    }

    #[test]
    fn the_locus_faults_parser_never_panics_on_hostile_values() {
        let near = ["seed=3,launch=@2", "copy=0.5;alloc=@1@9", "wait=1", ""];
        let values = crate::env_fuzz::values(0x4641_554c, &near, crate::env_fuzz::CASES);
        let n = crate::env_fuzz::run("LOCUS_FAULTS", &values, |v| {
            if let Err(reason) = check_spec(v) {
                let e = format!("LOCUS_FAULTS: {reason}");
                crate::env_fuzz::assert_clear(&e, "LOCUS_FAULTS", v, &[]);
            }
        });
        assert!(n >= 4000, "{n} values");
    }
}
