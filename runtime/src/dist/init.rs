//! [`init`]: a process joins its job as the launcher describes it (torchrun, Slurm, Open
//! MPI, MPICH; see [`Launch`]).
//!
//! The store is at `MASTER_ADDR:MASTER_PORT`. Under torchrun (`TORCHELASTIC_RUN_ID` is set)
//! the agent already hosts one there, speaking PyTorch's TCPStore protocol, and every rank
//! is its client; otherwise rank 0 hosts it ([`TcpStore::serve`] on every interface) and
//! the others connect, retrying until the timeout. Keys are kept under
//! `locus/<run id>/<restart>/`, so they never meet the agent's own keys or an earlier
//! attempt's. Each rank then joins the [`ProcessGroup`], listening on the interface it
//! reaches the master through.

use std::net::{IpAddr, Ipv4Addr, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::{Launch, ProcessGroup, Store, TcpStore};
use crate::device::{Device, DeviceId};
use crate::error::{Error, Result};

/// PyTorch's default for collectives and the store: 10 minutes.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// A process's place in a multi-process job and its group.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::dist::{self, Launch, ReduceOp};
/// use locus::{Cpu, Tensor};
/// // One process on its own (a launcher sets RANK, WORLD_SIZE, ... and `dist::init()` reads them).
/// let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
/// let launch = Launch::builder().rank(0, 1).master("127.0.0.1", port).build()?;
/// let d = dist::init_with(launch, std::time::Duration::from_secs(10))?;
/// let sum = d.group().all_reduce(&Tensor::<Cpu>::ones([3])?, ReduceOp::Sum)?;
/// assert_eq!((d.rank(), d.world_size(), sum.to_vec()?), (0, 1, vec![1.0; 3]));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Dist {
    launch: Launch,
    store: Arc<dyn Store>,
    group: ProcessGroup,
    /// The address this rank's groups listen on.
    ip: IpAddr,
    timeout: Duration,
    /// Sub-groups made so far (every rank makes them in the same order).
    groups: AtomicUsize,
}

impl std::fmt::Debug for Dist {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Dist {{ rank: {}, world_size: {} }}", self.launch.rank, self.launch.world_size)
    }
}

impl Dist {
    /// This process's rank, `0..world_size`.
    pub fn rank(&self) -> usize {
        self.launch.rank
    }

    /// How many processes the job has.
    pub fn world_size(&self) -> usize {
        self.launch.world_size
    }

    /// This process's rank on its machine: the device it should use, usually.
    pub fn local_rank(&self) -> usize {
        self.launch.local_rank
    }

    /// The launch this process joined by.
    pub fn launch(&self) -> &Launch {
        &self.launch
    }

    /// This rank's device: `cuda:{local rank}`, or the one `LOCUS_DEVICE_MAP` or
    /// [`LaunchBuilder::device`](super::LaunchBuilder::device) names, as a run-time
    /// placement (enter it with `with_device!(dyn d.device()? => ..)` for static code).
    /// The group is bound to it: its tensors' collectives run on NCCL on the cuda backend.
    /// An `Err` when the machine has no such device (the group then moves device tensors
    /// of any device over TCP).
    pub fn device(&self) -> Result<crate::device::Dyn> {
        let want = DeviceId::Cuda(self.launch.device_ordinal());
        match self.group.device() {
            Some(d) => Ok(crate::device::Dyn::new(d)),
            None => Err(Error::Dist {
                op: "device",
                reason: format!(
                    "rank {} (local rank {}) has no device: {want} does not exist on this machine ({} devices); \
                     launch at most one process per device, or map local ranks to devices with LOCUS_DEVICE_MAP",
                    self.launch.rank,
                    self.launch.local_rank,
                    crate::backend::device_count().unwrap_or(0)
                ),
            }),
        }
    }

    /// [`Local`](crate::Local), the role of this rank's device, which `init` bound: so
    /// code under a launcher is typed (`Tensor<Local>`) rather than `Dyn`.
    ///
    /// An `Err` when this rank has no device (see [`device`](Self::device)), or when
    /// `Local` is bound to another device: by the program or `LOCUS_BIND` before `init`, or
    /// by another rank's `init` in this process (ranks run as threads of one process
    /// share one `Local`; each process of a real job has its own).
    pub fn local(&self) -> Result<crate::role::Local> {
        let device = self.device()?.id();
        let local = <crate::role::Local as crate::device::StaticDevice>::resolve()?;
        match local.id() {
            d if d == device => Ok(local),
            d => Err(Error::Role {
                role: "Local",
                reason: format!(
                    "rank {} runs on {device}, but Local is bound to {d} in this process                      (bound before dist::init, or by another rank's init in this process);                      give each rank a process of its own, or use `device()` for a run-time placement",
                    self.launch.rank
                ),
            }),
        }
    }

    /// The group of every process of the job.
    pub fn group(&self) -> &ProcessGroup {
        &self.group
    }

    /// The store the processes met through (keys under this job's prefix).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// A group of the processes `ranks` (`torch.distributed.new_group`): every process
    /// of the job calls it, in the same order as the others; the members get their group
    /// (their rank in it is their place in the sorted `ranks`), the others `None`.
    /// Duplicate, missing or out-of-range ranks are an `Err`.
    pub fn new_group(&self, ranks: &[usize]) -> Result<Option<ProcessGroup>> {
        let id = self.groups.fetch_add(1, Ordering::SeqCst);
        let mut members = ranks.to_vec();
        members.sort_unstable();
        members.dedup();
        let world = self.launch.world_size;
        if members.is_empty() || members.len() != ranks.len() || members.iter().any(|&r| r >= world) {
            return Err(Error::Dist {
                op: "new_group",
                reason: format!("{ranks:?} are not distinct ranks of a world of {world} (at least one)"),
            });
        }
        let Some(me) = members.iter().position(|&r| r == self.launch.rank) else { return Ok(None) };
        let key = members.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
        let store: Arc<dyn Store> =
            Arc::new(Prefixed { prefix: format!("group{id}/{key}/"), inner: Arc::clone(&self.store) });
        let group = ProcessGroup::with_address(store, me, members.len(), self.timeout, self.ip)?;
        bind(group, self.group.device()).map(Some)
    }
}

/// Joins the job the environment describes ([`Launch::from_env`]), with the timeout of
/// `LOCUS_DIST_TIMEOUT` (seconds, from a nanosecond to a year; default [`DEFAULT_TIMEOUT`]).
pub fn init() -> Result<Dist> {
    let timeout = match std::env::var("LOCUS_DIST_TIMEOUT") {
        Ok(v) => parse_timeout(&v).map_err(init_err)?,
        Err(_) => DEFAULT_TIMEOUT,
    };
    let agent = std::env::var("TORCHELASTIC_RUN_ID").ok();
    let restart = std::env::var("TORCHELASTIC_RESTART_COUNT").unwrap_or_else(|_| "0".into());
    join(Launch::from_env()?, timeout, agent.map(|run| (run, restart)))
}

/// Joins the job `launch` describes: rank 0 hosts the store at its master address.
pub fn init_with(launch: Launch, timeout: Duration) -> Result<Dist> {
    join(launch, timeout, None)
}

/// The longest `LOCUS_DIST_TIMEOUT`, in seconds: a year. Longer is no timeout in
/// practice, and far longer breaks: `Duration::from_secs_f64` panics past `u64::MAX`
/// seconds and `Instant::now() + timeout` past `i64::MAX`.
const MAX_TIMEOUT_SECS: f64 = 365.0 * 24.0 * 3600.0;

/// The shortest, in seconds: a nanosecond, as less is a zero `Duration`, which a socket
/// refuses as its timeout.
const MIN_TIMEOUT_SECS: f64 = 1e-9;

/// A value of `LOCUS_DIST_TIMEOUT`: seconds from [`MIN_TIMEOUT_SECS`] to
/// [`MAX_TIMEOUT_SECS`], spaces around them ignored.
fn parse_timeout(v: &str) -> std::result::Result<Duration, String> {
    match v.trim().parse::<f64>() {
        Ok(s) if (MIN_TIMEOUT_SECS..=MAX_TIMEOUT_SECS).contains(&s) => Ok(Duration::from_secs_f64(s)),
        _ => Err(format!(
            "`LOCUS_DIST_TIMEOUT={v}` is not a number of seconds from {MIN_TIMEOUT_SECS:e} to {MAX_TIMEOUT_SECS} (a year)"
        )),
    }
}

fn init_err(reason: String) -> Error {
    Error::Dist { op: "init", reason }
}

/// `agent`: torchrun's run id and restart count, when its agent hosts the store.
fn join(launch: Launch, timeout: Duration, agent: Option<(String, String)>) -> Result<Dist> {
    let master = format!("{}:{}", launch.master_addr, launch.master_port);
    let store: Arc<dyn Store> = match (&agent, launch.rank) {
        (None, 0) => Arc::new(TcpStore::serve(&format!("0.0.0.0:{}", launch.master_port), launch.world_size, timeout)?),
        _ => Arc::new(TcpStore::connect(&master, timeout)?),
    };
    let prefix = match &agent {
        Some((run, restart)) => format!("locus/{run}/{restart}/"),
        None => "locus/job/".into(),
    };
    let store: Arc<dyn Store> = Arc::new(Prefixed { prefix, inner: store });
    let ip = local_ip_towards(&launch.master_addr, launch.master_port);
    let group = ProcessGroup::with_address(Arc::clone(&store), launch.rank, launch.world_size, timeout, ip).map_err(
        |e| match e {
            Error::Dist { op, reason } => Error::Dist {
                op,
                reason: format!("rank {} of {} (store at {master}): {reason}", launch.rank, launch.world_size),
            },
            other => other,
        },
    )?;
    let device = DeviceId::Cuda(launch.device_ordinal());
    let exists = crate::backend::for_device(device).is_ok()
        && crate::backend::device_count().is_ok_and(|n| (launch.device_ordinal() as usize) < n);
    let group = bind(group, exists.then_some(device))?;
    if exists {
        crate::role::bind_local(device);
    }
    Ok(Dist { launch, store, group, ip, timeout, groups: AtomicUsize::new(0) })
}

/// Binds `group` to `device`, or takes part in the others' binding without one.
fn bind(group: ProcessGroup, device: Option<DeviceId>) -> Result<ProcessGroup> {
    match device {
        Some(d) => group.with_device(d),
        None => group.without_device(),
    }
}

/// The address of this machine's interface toward the master (no packet is sent: a UDP
/// socket's connect only picks the route); loopback when the master is this machine or
/// no route is found.
fn local_ip_towards(master: &str, port: u16) -> IpAddr {
    let loopback = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let Ok(socket) = UdpSocket::bind("0.0.0.0:0") else { return loopback };
    match socket.connect((master, port)).and_then(|()| socket.local_addr()) {
        Ok(a) if !a.ip().is_unspecified() => a.ip(),
        _ => loopback,
    }
}

/// A store whose keys all start with `prefix`.
struct Prefixed {
    prefix: String,
    inner: Arc<dyn Store>,
}

impl Store for Prefixed {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.set(&format!("{}{key}", self.prefix), value)
    }

    fn get(&self, key: &str) -> Result<Vec<u8>> {
        self.inner.get(&format!("{}{key}", self.prefix))
    }

    fn add(&self, key: &str, amount: i64) -> Result<i64> {
        self.inner.add(&format!("{}{key}", self.prefix), amount)
    }

    fn wait(&self, keys: &[&str]) -> Result<()> {
        let keys: Vec<String> = keys.iter().map(|k| format!("{}{k}", self.prefix)).collect();
        self.inner.wait(&keys.iter().map(String::as_str).collect::<Vec<_>>())
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_timeout, MAX_TIMEOUT_SECS};
    use crate::env_fuzz;
    use std::time::{Duration, Instant};

    #[test]
    fn timeouts_never_panic_and_stay_from_a_nanosecond_to_a_year() {
        let near = ["600", "0.5", "1e-9", "31536000", "3.2e7", "1e308", "inf"];
        let values = env_fuzz::values(0x5449_4d45, &near, env_fuzz::CASES);
        let n = env_fuzz::run("LOCUS_DIST_TIMEOUT", &values, |v| match parse_timeout(v) {
            Ok(d) => {
                assert!(!d.is_zero() && d <= Duration::from_secs_f64(MAX_TIMEOUT_SECS), "`{v}` gave {d:?}");
                // What the store and the group do with it.
                assert!(Instant::now().checked_add(d).is_some());
            }
            Err(e) => {
                let s = v.trim().parse::<f64>();
                assert!(s.is_err() || s.is_ok_and(|s| !(1e-9..=MAX_TIMEOUT_SECS).contains(&s)), "`{v}`: {e}");
                env_fuzz::assert_clear(&e, "LOCUS_DIST_TIMEOUT", v, &["number of seconds from 1e-9 to 31536000"]);
            }
        });
        assert!(n >= 4000, "{n} values");
        // Before the cap these were accepted: `1e308` panicked in `Duration::from_secs_f64`,
        // `1e19` in `Instant::now() + timeout`, and `1e-10` was a zero timeout.
        for refused in ["1e308", "1e19", "1e-10", "0", "-1", "NaN", "inf"] {
            assert!(parse_timeout(refused).is_err(), "{refused}");
        }
        assert_eq!(parse_timeout(" 600\n"), Ok(Duration::from_secs(600)));
        assert_eq!(parse_timeout("1e-9"), Ok(Duration::from_nanos(1)));
    }
}
