//! Tests across real processes on this machine: the test binary runs itself again, once
//! per rank (`--exact <test> --nocapture`, with `LOCUS_RANKS_TEST_RANK`, `..._WORLD` and
//! `..._DIR` set). Each rank runs the test's body and exits non-zero on `Err`; the parent
//! waits for all of them (killing them after [`DEADLINE`]) and asserts that each
//! succeeded, showing their logs when one did not.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const RANK: &str = "LOCUS_RANKS_TEST_RANK";
const WORLD: &str = "LOCUS_RANKS_TEST_WORLD";
const DIR: &str = "LOCUS_RANKS_TEST_DIR";

/// How long the parent lets the processes run before it kills them (the tiny_gpt run,
/// a debug build of 3 processes on CI's 2 cores, takes 20 to 40 s).
pub const DEADLINE: Duration = Duration::from_secs(300);

/// What one rank runs: its rank, the world size and a directory all ranks share (made
/// before they start); `Err` with a message on any difference.
pub type Body = fn(usize, usize, &Path) -> Result<(), String>;

/// A fresh directory for one test's logs and shared files.
pub fn fresh_dir(test: &str) -> PathBuf {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_nanos();
    let dir = std::env::temp_dir().join(format!("locus-ranks-{test}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Waits for every child (killing them after [`DEADLINE`]) and asserts that each exited
/// with success, showing the logs of those that did not (and keeping `dir` then).
pub fn wait_all(what: &str, mut children: Vec<Child>, log: impl Fn(usize) -> PathBuf, dir: &Path) {
    let start = Instant::now();
    let mut status: Vec<Option<ExitStatus>> = vec![None; children.len()];
    while status.iter().any(Option::is_none) {
        for (c, s) in children.iter_mut().zip(&mut status) {
            if s.is_none() {
                *s = c.try_wait().unwrap();
            }
        }
        if start.elapsed() > DEADLINE {
            for (c, s) in children.iter_mut().zip(&status) {
                if s.is_none() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let failed: Vec<String> = status
        .iter()
        .enumerate()
        .filter(|(_, s)| !s.is_some_and(|s| s.success()))
        .map(|(r, s)| {
            let how = s.map_or_else(|| format!("killed after {DEADLINE:?}"), |s| s.to_string());
            format!("rank {r}: {how}\n{}", std::fs::read_to_string(log(r)).unwrap_or_default())
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{what}: {} of {} ranks failed (logs in {}):\n{}",
        failed.len(),
        status.len(),
        dir.display(),
        failed.join("\n")
    );
}

/// In the parent: runs `test` of this binary as `world` processes and asserts that each
/// succeeds. In a rank's process: runs `body` and exits with 1 on `Err`.
pub fn run_ranks(test: &str, world: usize, body: Body) {
    if let (Ok(rank), Ok(world), Some(dir)) = (std::env::var(RANK), std::env::var(WORLD), std::env::var_os(DIR)) {
        let (rank, world): (usize, usize) = (rank.parse().unwrap(), world.parse().unwrap());
        if let Err(e) = body(rank, world, Path::new(&dir)) {
            eprintln!("rank {rank} of {world}: {e}");
            std::process::exit(1);
        }
        return;
    }
    let dir = fresh_dir(test);
    let shared = dir.join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let exe = std::env::current_exe().unwrap();
    let log = |r: usize| dir.join(format!("rank{r}.log"));
    let children = (0..world)
        .map(|r| {
            let out = File::create(log(r)).unwrap();
            Command::new(&exe)
                .args(["--exact", test, "--nocapture", "--test-threads=1"])
                .env(RANK, r.to_string())
                .env(WORLD, world.to_string())
                .env(DIR, &shared)
                .stdout(out.try_clone().unwrap())
                .stderr(out)
                .spawn()
                .unwrap()
        })
        .collect();
    wait_all(test, children, log, &dir);
    // A rank that skipped says why in its log, which goes with the directory: the reason
    // goes to this test's output first.
    for r in 0..world {
        let text = std::fs::read_to_string(log(r)).unwrap_or_default();
        for line in text.lines().filter(|l| l.starts_with("skipped:")) {
            eprintln!("rank {r}: {line}");
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}
