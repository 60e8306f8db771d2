//! How a process learns its place in a multi-process job: its rank, the world size, its
//! rank on its own machine and where the store lives, read from the variables a launcher
//! sets (torchrun, Slurm's srun, Open MPI's mpirun, MPICH's mpiexec) or given explicitly.

use crate::error::{Error, Result};

/// The port of the store when a launcher names no `MASTER_PORT` (Slurm): PyTorch's default.
pub const DEFAULT_MASTER_PORT: u16 = 29500;

/// One process's place in the job: global rank of `world_size`, rank of `local_world_size`
/// on its machine, and the address of the store that rank 0 hosts (or torchrun's agent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// This process's rank, `0..world_size`.
    pub rank: usize,
    /// How many processes the job has.
    pub world_size: usize,
    /// This process's rank on its machine, `0..local_world_size` (its device, usually).
    pub local_rank: usize,
    /// How many processes run on this machine.
    pub local_world_size: usize,
    /// The host of the store.
    pub master_addr: String,
    /// The port of the store.
    pub master_port: u16,
    /// This rank's CUDA ordinal when it is not its local rank: from `LOCUS_DEVICE_MAP`
    /// (ordinals by local rank, e.g. `0,2,4,6`) or [`LaunchBuilder::device`].
    pub device: Option<u32>,
}

fn init_err(reason: String) -> Error {
    Error::Dist { op: "init", reason }
}

/// `name`'s value, or an error naming it.
fn need(get: &impl Fn(&str) -> Option<String>, name: &str, family: &str) -> Result<String> {
    get(name).ok_or_else(|| init_err(format!("{family} launch: `{name}` is not set")))
}

/// `name`'s value as a number, or an error naming the variable and its value.
fn num(get: &impl Fn(&str) -> Option<String>, name: &str, family: &str) -> Result<usize> {
    let v = need(get, name, family)?;
    v.trim().parse().map_err(|_| init_err(format!("{family} launch: `{name}={v}` is not a number")))
}

/// `name`'s value as a number when it is set.
fn opt_num(get: &impl Fn(&str) -> Option<String>, name: &str, family: &str) -> Result<Option<usize>> {
    match get(name) {
        Some(_) => num(get, name, family).map(Some),
        None => Ok(None),
    }
}

fn port(get: &impl Fn(&str) -> Option<String>, family: &str, default: Option<u16>) -> Result<u16> {
    match (get("MASTER_PORT"), default) {
        (None, Some(d)) => Ok(d),
        (None, None) => Err(init_err(format!("{family} launch: `MASTER_PORT` is not set"))),
        (Some(v), _) => match v.trim().parse::<u16>() {
            Ok(p) if p > 0 => Ok(p),
            _ => Err(init_err(format!("{family} launch: `MASTER_PORT={v}` is not a port (1..=65535)"))),
        },
    }
}

/// The first host of a Slurm node list in its compressed form: `node[01-04,07],gpu5` is
/// `node01`, `a[1-2]-ib[3-4]` is `a1-ib3`. `None` when the list is empty or malformed.
fn first_slurm_host(nodelist: &str) -> Option<String> {
    let mut host = String::new();
    let mut chars = nodelist.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            ',' => break,
            '[' => {
                let group: String = chars.by_ref().take_while(|&c| c != ']').collect();
                let first = group.split([',', '-']).next()?.trim();
                if first.is_empty() {
                    return None;
                }
                host.push_str(first);
            }
            ']' => return None,
            c => host.push(c),
        }
    }
    (!host.is_empty()).then_some(host)
}

/// Tasks on node `node` from Slurm's `SLURM_TASKS_PER_NODE` (`2(x3),1`: two tasks on each
/// of the first three nodes, one on the fourth).
fn slurm_tasks_on_node(spec: &str, node: usize) -> Option<usize> {
    let mut seen = 0;
    for part in spec.split(',') {
        let (n, times) = match part.split_once("(x") {
            Some((n, rest)) => (n, rest.strip_suffix(')')?.trim().parse::<usize>().ok()?),
            None => (part, 1),
        };
        seen += times;
        if node < seen {
            return n.trim().parse().ok();
        }
    }
    None
}

impl Launch {
    /// The launch the process environment describes; see [`Launch::from_vars`].
    pub fn from_env() -> Result<Launch> {
        Launch::from_vars(|name| std::env::var(name).ok())
    }

    /// The CUDA ordinal of this rank's device: [`Launch::device`], else the local rank.
    pub fn device_ordinal(&self) -> u32 {
        self.device.unwrap_or(self.local_rank as u32)
    }

    /// The launch described by the variables `get` returns, the first family whose rank
    /// variable is present winning:
    ///
    /// 1. torchrun: `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, `MASTER_ADDR`,
    ///    `MASTER_PORT`, all required.
    /// 2. Slurm: `SLURM_PROCID`, `SLURM_NTASKS`, `SLURM_LOCALID`, the local world size from
    ///    `SLURM_NTASKS_PER_NODE` or else `SLURM_TASKS_PER_NODE` (at `SLURM_NODEID`, 0 when
    ///    unset); the master is `MASTER_ADDR` when set, else the first host of
    ///    `SLURM_JOB_NODELIST` (or `SLURM_NODELIST`); the port is `MASTER_PORT` or
    ///    [`DEFAULT_MASTER_PORT`].
    /// 3. Open MPI: `OMPI_COMM_WORLD_RANK`, `_SIZE`, `_LOCAL_RANK`, `_LOCAL_SIZE`, and
    ///    `MASTER_ADDR`, `MASTER_PORT`, all required.
    /// 4. MPICH / PMI: `PMI_RANK`, `PMI_SIZE`, `MPI_LOCALRANKID` and `MPI_LOCALNRANKS` (0 and
    ///    1 when unset), `MASTER_ADDR`, `MASTER_PORT`.
    ///
    /// `LOCUS_DEVICE_MAP`, when set, gives the device of each local rank (comma-separated
    /// CUDA ordinals, at least `local_world_size` of them).
    ///
    /// A missing or contradictory variable is [`Error::Dist`] with op `init`, naming it.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Launch> {
        let launch = if get("RANK").is_some() {
            let f = "torchrun";
            Launch {
                rank: num(&get, "RANK", f)?,
                world_size: num(&get, "WORLD_SIZE", f)?,
                local_rank: num(&get, "LOCAL_RANK", f)?,
                local_world_size: num(&get, "LOCAL_WORLD_SIZE", f)?,
                master_addr: need(&get, "MASTER_ADDR", f)?,
                master_port: port(&get, f, None)?,
                device: None,
            }
        } else if get("SLURM_PROCID").is_some() {
            let f = "Slurm";
            let local_world_size = match opt_num(&get, "SLURM_NTASKS_PER_NODE", f)? {
                Some(n) => n,
                None => {
                    let spec = need(&get, "SLURM_TASKS_PER_NODE", f).map_err(|_| {
                        init_err(format!(
                            "{f} launch: neither `SLURM_NTASKS_PER_NODE` nor `SLURM_TASKS_PER_NODE` is set"
                        ))
                    })?;
                    let node = opt_num(&get, "SLURM_NODEID", f)?.unwrap_or(0);
                    slurm_tasks_on_node(&spec, node).ok_or_else(|| {
                        init_err(format!(
                            "{f} launch: `SLURM_TASKS_PER_NODE={spec}` names no task count for node {node} (`SLURM_NODEID`)"
                        ))
                    })?
                }
            };
            let master_addr = match get("MASTER_ADDR") {
                Some(a) => a,
                None => {
                    let (name, list) = match get("SLURM_JOB_NODELIST") {
                        Some(l) => ("SLURM_JOB_NODELIST", l),
                        None => ("SLURM_NODELIST", need(&get, "SLURM_NODELIST", f).map_err(|_| {
                            init_err(format!("{f} launch: neither `MASTER_ADDR`, `SLURM_JOB_NODELIST` nor `SLURM_NODELIST` is set"))
                        })?),
                    };
                    first_slurm_host(&list)
                        .ok_or_else(|| init_err(format!("{f} launch: `{name}={list}` is not a node list")))?
                }
            };
            Launch {
                rank: num(&get, "SLURM_PROCID", f)?,
                world_size: num(&get, "SLURM_NTASKS", f)?,
                local_rank: num(&get, "SLURM_LOCALID", f)?,
                local_world_size,
                master_addr,
                master_port: port(&get, f, Some(DEFAULT_MASTER_PORT))?,
                device: None,
            }
        } else if get("OMPI_COMM_WORLD_RANK").is_some() {
            let f = "Open MPI";
            Launch {
                rank: num(&get, "OMPI_COMM_WORLD_RANK", f)?,
                world_size: num(&get, "OMPI_COMM_WORLD_SIZE", f)?,
                local_rank: num(&get, "OMPI_COMM_WORLD_LOCAL_RANK", f)?,
                local_world_size: num(&get, "OMPI_COMM_WORLD_LOCAL_SIZE", f)?,
                master_addr: need(&get, "MASTER_ADDR", f)?,
                master_port: port(&get, f, None)?,
                device: None,
            }
        } else if get("PMI_RANK").is_some() {
            let f = "MPICH";
            Launch {
                rank: num(&get, "PMI_RANK", f)?,
                world_size: num(&get, "PMI_SIZE", f)?,
                local_rank: opt_num(&get, "MPI_LOCALRANKID", f)?.unwrap_or(0),
                local_world_size: opt_num(&get, "MPI_LOCALNRANKS", f)?.unwrap_or(1),
                master_addr: need(&get, "MASTER_ADDR", f)?,
                master_port: port(&get, f, None)?,
                device: None,
            }
        } else {
            return Err(init_err(
                "no launcher found: none of `RANK` (torchrun), `SLURM_PROCID` (Slurm), \
                 `OMPI_COMM_WORLD_RANK` (Open MPI), `PMI_RANK` (MPICH) is set; \
                 use Launch::builder() to describe the process explicitly"
                    .into(),
            ));
        };
        let mut launch = launch.check()?;
        if let Some(map) = get("LOCUS_DEVICE_MAP") {
            let ordinals: Option<Vec<u32>> = map.split(',').map(|o| o.trim().parse().ok()).collect();
            let Some(ordinals) = ordinals else {
                return Err(init_err(format!(
                    "`LOCUS_DEVICE_MAP={map}` is not a comma-separated list of CUDA ordinals"
                )));
            };
            let Some(&ordinal) = ordinals.get(launch.local_rank) else {
                return Err(init_err(format!(
                    "`LOCUS_DEVICE_MAP={map}` names {} devices, none for local rank {}",
                    ordinals.len(),
                    launch.local_rank
                )));
            };
            launch.device = Some(ordinal);
        }
        Ok(launch)
    }

    /// A launch given explicitly, checked as [`Launch::from_vars`] checks one.
    pub fn new(
        rank: usize,
        world_size: usize,
        local_rank: usize,
        local_world_size: usize,
        master_addr: impl Into<String>,
        master_port: u16,
    ) -> Result<Launch> {
        Launch {
            rank,
            world_size,
            local_rank,
            local_world_size,
            master_addr: master_addr.into(),
            master_port,
            device: None,
        }
        .check()
    }

    /// A builder starting from a single process on this machine: rank 0 of 1, local rank 0
    /// of 1, store at `127.0.0.1:`[`DEFAULT_MASTER_PORT`].
    pub fn builder() -> LaunchBuilder {
        LaunchBuilder(Launch {
            rank: 0,
            world_size: 1,
            local_rank: 0,
            local_world_size: 1,
            master_addr: "127.0.0.1".into(),
            master_port: DEFAULT_MASTER_PORT,
            device: None,
        })
    }

    fn check(self) -> Result<Launch> {
        let Launch { rank, world_size, local_rank, local_world_size, .. } = self;
        if world_size == 0 {
            return Err(init_err("the world size is 0".into()));
        }
        if rank >= world_size {
            return Err(init_err(format!("rank {rank} is not below the world size {world_size}")));
        }
        if local_world_size == 0 || local_world_size > world_size {
            return Err(init_err(format!(
                "the local world size {local_world_size} is not in 1..={world_size} (the world size)"
            )));
        }
        if local_rank >= local_world_size {
            return Err(init_err(format!(
                "local rank {local_rank} is not below the local world size {local_world_size}"
            )));
        }
        if self.master_addr.trim().is_empty() {
            return Err(init_err("the master address is empty".into()));
        }
        if self.master_port == 0 {
            return Err(init_err("the master port is 0".into()));
        }
        Ok(self)
    }
}

/// Builds a [`Launch`] field by field; [`LaunchBuilder::build`] checks it.
#[derive(Clone, Debug)]
pub struct LaunchBuilder(Launch);

impl LaunchBuilder {
    /// Sets the rank and the world size.
    pub fn rank(mut self, rank: usize, world_size: usize) -> Self {
        (self.0.rank, self.0.world_size) = (rank, world_size);
        self
    }
    /// Sets the local rank and the local world size.
    pub fn local_rank(mut self, local_rank: usize, local_world_size: usize) -> Self {
        (self.0.local_rank, self.0.local_world_size) = (local_rank, local_world_size);
        self
    }
    /// Sets this rank's CUDA ordinal (by default its local rank).
    pub fn device(mut self, ordinal: u32) -> Self {
        self.0.device = Some(ordinal);
        self
    }
    /// Sets the store's host and port.
    pub fn master(mut self, addr: impl Into<String>, port: u16) -> Self {
        (self.0.master_addr, self.0.master_port) = (addr.into(), port);
        self
    }
    /// The launch, or [`Error::Dist`] when its numbers contradict each other.
    pub fn build(self) -> Result<Launch> {
        self.0.check()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn launch(vars: &[(&str, &str)]) -> Result<Launch> {
        let map: HashMap<String, String> = vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Launch::from_vars(|k| map.get(k).cloned())
    }

    fn err(vars: &[(&str, &str)]) -> String {
        match launch(vars) {
            Err(Error::Dist { op: "init", reason }) => reason,
            other => panic!("expected an init error, got {other:?}"),
        }
    }

    const TORCHRUN: [(&str, &str); 6] = [
        ("RANK", "5"),
        ("WORLD_SIZE", "8"),
        ("LOCAL_RANK", "1"),
        ("LOCAL_WORLD_SIZE", "4"),
        ("MASTER_ADDR", "10.0.0.1"),
        ("MASTER_PORT", "29400"),
    ];

    #[test]
    fn a_device_map_names_each_local_ranks_device() {
        let mut v = TORCHRUN.to_vec();
        assert_eq!(launch(&v).unwrap().device_ordinal(), 1);
        v.push(("LOCUS_DEVICE_MAP", "6, 4,2,0"));
        let l = launch(&v).unwrap();
        assert_eq!((l.device, l.device_ordinal()), (Some(4), 4));
        v.pop();
        v.push(("LOCUS_DEVICE_MAP", "3"));
        assert!(err(&v).contains("none for local rank 1"), "{}", err(&v));
        v.pop();
        v.push(("LOCUS_DEVICE_MAP", "0,x"));
        assert!(err(&v).contains("not a comma-separated list"), "{}", err(&v));
        assert_eq!(Launch::builder().device(3).build().unwrap().device_ordinal(), 3);
    }

    #[test]
    fn torchrun() {
        assert_eq!(launch(&TORCHRUN).unwrap(), Launch::new(5, 8, 1, 4, "10.0.0.1", 29400).unwrap());
    }

    #[test]
    fn slurm() {
        let base = [
            ("SLURM_PROCID", "6"),
            ("SLURM_NTASKS", "8"),
            ("SLURM_LOCALID", "2"),
            ("SLURM_TASKS_PER_NODE", "4(x2)"),
            ("SLURM_NODEID", "1"),
            ("SLURM_JOB_NODELIST", "gpu[07-08]"),
        ];
        assert_eq!(launch(&base).unwrap(), Launch::new(6, 8, 2, 4, "gpu07", DEFAULT_MASTER_PORT).unwrap());
        let mut v = base.to_vec();
        v.extend([("SLURM_NTASKS_PER_NODE", "3"), ("MASTER_PORT", "1234"), ("MASTER_ADDR", "head")]);
        assert_eq!(launch(&v).unwrap(), Launch::new(6, 8, 2, 3, "head", 1234).unwrap());
        let v: Vec<_> = base
            .iter()
            .copied()
            .filter(|(k, _)| *k != "SLURM_JOB_NODELIST")
            .chain([("SLURM_NODELIST", "a1,b2")])
            .collect();
        assert_eq!(launch(&v).unwrap().master_addr, "a1");
    }

    #[test]
    fn open_mpi_and_mpich() {
        let ompi = [
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
            ("MASTER_ADDR", "m"),
            ("MASTER_PORT", "7000"),
        ];
        assert_eq!(launch(&ompi).unwrap(), Launch::new(3, 4, 1, 2, "m", 7000).unwrap());
        assert!(err(&ompi[..4]).contains("`MASTER_ADDR` is not set"));
        let pmi = [("PMI_RANK", "1"), ("PMI_SIZE", "2"), ("MASTER_ADDR", "m"), ("MASTER_PORT", "7000")];
        assert_eq!(launch(&pmi).unwrap(), Launch::new(1, 2, 0, 1, "m", 7000).unwrap());
        let mut v = pmi.to_vec();
        v.extend([("MPI_LOCALRANKID", "1"), ("MPI_LOCALNRANKS", "2")]);
        assert_eq!(launch(&v).unwrap(), Launch::new(1, 2, 1, 2, "m", 7000).unwrap());
    }

    #[test]
    fn precedence() {
        // torchrun inside an srun allocation inside mpirun: torchrun's variables win.
        let mut v = TORCHRUN.to_vec();
        v.extend([("SLURM_PROCID", "0"), ("OMPI_COMM_WORLD_RANK", "0"), ("PMI_RANK", "0")]);
        assert_eq!(launch(&v).unwrap().rank, 5);
        // Slurm beats the MPIs (srun --mpi=pmix also sets PMI_RANK).
        let v = [
            ("PMI_RANK", "0"),
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NTASKS_PER_NODE", "2"),
            ("SLURM_NODELIST", "n1"),
        ];
        assert_eq!(launch(&v).unwrap().rank, 1);
        assert!(err(&[]).contains("no launcher found"));
    }

    #[test]
    fn nodelist() {
        assert_eq!(first_slurm_host("node[01-04,07],gpu5").as_deref(), Some("node01"));
        assert_eq!(first_slurm_host("gpu5,node[1-2]").as_deref(), Some("gpu5"));
        assert_eq!(first_slurm_host("a[3,1-2]-ib[10-11]").as_deref(), Some("a3-ib10"));
        assert_eq!(first_slurm_host("single").as_deref(), Some("single"));
        assert_eq!(first_slurm_host(""), None);
        assert_eq!(first_slurm_host("n[]"), None);
        assert_eq!(first_slurm_host("n]"), None);
        assert_eq!(slurm_tasks_on_node("2(x3),1", 2), Some(2));
        assert_eq!(slurm_tasks_on_node("2(x3),1", 3), Some(1));
        assert_eq!(slurm_tasks_on_node("2(x3),1", 4), None);
    }

    fn with(k: &'static str, v: &'static str) -> Vec<(&'static str, &'static str)> {
        TORCHRUN.iter().map(|&(a, b)| if a == k { (a, v) } else { (a, b) }).collect()
    }

    #[test]
    fn errors() {
        assert!(err(&with("RANK", "8")).contains("rank 8 is not below the world size 8"));
        assert!(err(&with("LOCAL_RANK", "4")).contains("local rank 4 is not below the local world size 4"));
        assert!(err(&with("WORLD_SIZE", "0")).contains("the world size is 0"));
        assert!(err(&with("WORLD_SIZE", "eight")).contains("`WORLD_SIZE=eight` is not a number"));
        assert!(err(&with("MASTER_PORT", "70000")).contains("`MASTER_PORT=70000` is not a port"));
        assert!(err(&with("MASTER_PORT", "0")).contains("`MASTER_PORT=0`"));
        assert!(err(&with("LOCAL_WORLD_SIZE", "9")).contains("local world size 9"));
        assert!(err(&TORCHRUN[..5]).contains("`MASTER_PORT` is not set"));
        let slurm =
            [("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1"), ("SLURM_LOCALID", "0"), ("SLURM_NTASKS_PER_NODE", "1")];
        assert!(err(&slurm).contains("SLURM_JOB_NODELIST"));
        assert!(err(&slurm[..3]).contains("SLURM_TASKS_PER_NODE"));
        let mut v = slurm.to_vec();
        v.push(("SLURM_JOB_NODELIST", "n[1-2"));
        assert_eq!(launch(&v).unwrap().master_addr, "n1"); // an unclosed group still names its first host
        v.push(("MASTER_PORT", "x"));
        assert!(err(&v).contains("`MASTER_PORT=x`"));
        assert!(Launch::builder().rank(2, 2).build().is_err());
        assert!(Launch::builder().master("", 1).build().is_err());
        let l = Launch::builder().rank(1, 2).local_rank(1, 2).master("h", 5).build().unwrap();
        assert_eq!(l, Launch::new(1, 2, 1, 2, "h", 5).unwrap());
    }

    /// Hostile environments (issue 38, item 4): 20 000 seeded sets of launcher variables
    /// (every launcher's names, each unset, a plausible value, an edge number, a huge or
    /// negative one, an empty or non-ASCII string, a Slurm node list or task spec, a
    /// device map). Each parse returns a launch that passes its own checks, or an init
    /// error: never a panic.
    #[test]
    fn launcher_variables_parse_to_a_checked_launch_or_an_init_error() {
        const NAMES: [&str; 23] = [
            "RANK",
            "WORLD_SIZE",
            "LOCAL_RANK",
            "LOCAL_WORLD_SIZE",
            "MASTER_ADDR",
            "MASTER_PORT",
            "SLURM_PROCID",
            "SLURM_NTASKS",
            "SLURM_LOCALID",
            "SLURM_NTASKS_PER_NODE",
            "SLURM_TASKS_PER_NODE",
            "SLURM_NODEID",
            "SLURM_JOB_NODELIST",
            "SLURM_NODELIST",
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
            "PMI_RANK",
            "PMI_SIZE",
            "MPI_LOCALRANKID",
            "MPI_LOCALNRANKS",
            "LOCUS_DEVICE_MAP",
        ];
        const VALUES: [&str; 24] = [
            "0",
            "1",
            "2",
            "3",
            "7",
            "65535",
            "65536",
            "18446744073709551615",
            "18446744073709551616",
            "-1",
            "",
            " ",
            "1e3",
            "x",
            "é",
            "10.0.0.1",
            "node[1-4,7]",
            "node[",
            "a,b[0-]",
            "2(x3),1",
            "(x)",
            "3(x0)",
            "0,1,2,3",
            "1,,2",
        ];
        let mut state = 38u64;
        let mut next = || {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            (z ^ (z >> 31)) as usize
        };
        // A valid set of each launcher's variables, which each case perturbs.
        let valid: [&[(&str, &str)]; 4] = [
            &TORCHRUN,
            &[
                ("SLURM_PROCID", "3"),
                ("SLURM_NTASKS", "8"),
                ("SLURM_LOCALID", "1"),
                ("SLURM_TASKS_PER_NODE", "4(x2)"),
                ("SLURM_NODEID", "0"),
                ("SLURM_JOB_NODELIST", "node[1-2]"),
            ],
            &[
                ("OMPI_COMM_WORLD_RANK", "1"),
                ("OMPI_COMM_WORLD_SIZE", "2"),
                ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
                ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
                ("MASTER_ADDR", "h"),
                ("MASTER_PORT", "7"),
            ],
            &[("PMI_RANK", "0"), ("PMI_SIZE", "1"), ("MASTER_ADDR", "h"), ("MASTER_PORT", "7")],
        ];
        let (mut ok, mut refused) = (0, 0);
        for case in 0..20_000 {
            let mut map: HashMap<String, String> =
                valid[next() % 4].iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            // Up to three variables changed, set or removed; every fourth case many more.
            let changes = if case % 4 == 0 { 3 + next() % 12 } else { next() % 4 };
            for _ in 0..changes {
                let name = NAMES[next() % NAMES.len()].to_string();
                if next() % 5 == 0 {
                    map.remove(&name);
                } else {
                    map.insert(name, VALUES[next() % VALUES.len()].to_string());
                }
            }
            match std::panic::catch_unwind(|| Launch::from_vars(|k| map.get(k).cloned())) {
                Err(_) => panic!("case {case} panicked: {map:?}"),
                Ok(Ok(l)) => {
                    ok += 1;
                    assert!(l.rank < l.world_size && l.local_rank < l.local_world_size, "case {case}: {l:?}");
                    assert!(l.local_world_size <= l.world_size && l.master_port != 0, "case {case}: {l:?}");
                    assert!(!l.master_addr.trim().is_empty(), "case {case}: {l:?}");
                }
                Ok(Err(Error::Dist { op: "init", reason })) => {
                    refused += 1;
                    assert!(!reason.is_empty(), "case {case}");
                }
                Ok(Err(other)) => panic!("case {case}: not an init error: {other:?} from {map:?}"),
            }
        }
        println!("{ok} parsed, {refused} refused");
        assert!(ok > 2_000 && refused > 5_000, "{ok} parsed, {refused} refused: the cases do not cover both");
    }
}
