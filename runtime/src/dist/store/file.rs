//! [`FileStore`]: a [`Store`] in a directory that every process of one machine can reach
//! (PyTorch's `FileStore`).

use std::fs::{self, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use crate::dist::Store;
use crate::error::{Error, Result};

/// A [`Store`] kept in a directory shared by the processes of one machine (PyTorch's
/// `FileStore`; std only, no daemon).
///
/// Each key is one file, named after the key (bytes outside `[A-Za-z0-9_-]` escaped as
/// `%XX`). [`set`](Store::set) writes a temporary file and renames it over the key's
/// file, so a reader sees the old value or the new one, never half of one.
/// [`get`](Store::get) and [`wait`](Store::wait) poll with short sleeps until the files
/// exist or the store's timeout passes. [`add`](Store::add) takes a lock file (created
/// with `create_new`, removed when done) around read-add-write, so counting is atomic
/// across processes; the counter is stored as decimal text, as PyTorch does, so `get`
/// on it returns e.g. `b"3"`.
///
/// A process that dies while holding an `add` lock leaves the lock file behind: other
/// `add`s on that key then fail after the timeout, naming the file to remove. Use a fresh
/// directory per job: keys of an earlier job in the same directory are still set.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use std::time::Duration;
/// use locus::dist::{FileStore, Store};
/// let dir = std::env::temp_dir().join(format!("locus-doc-file-store-{}", std::process::id()));
/// let store = FileStore::new(&dir, Duration::from_secs(5))?;
/// store.set("addr/0", b"127.0.0.1:29500")?;
/// assert_eq!(store.get("addr/0")?, b"127.0.0.1:29500");
/// assert_eq!(store.add("count", 2)?, 2);
/// assert_eq!(store.add("count", 1)?, 3);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), locus::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct FileStore {
    dir: PathBuf,
    timeout: Duration,
}

/// Distinguishes the temporary files of one process's `set`s.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// The longest sleep between two polls.
const MAX_POLL: Duration = Duration::from_millis(10);

impl FileStore {
    /// A store in `dir` (created if missing) whose blocking calls give up after
    /// `timeout`.
    pub fn new(dir: impl Into<PathBuf>, timeout: Duration) -> Result<Self> {
        let dir = dir.into();
        fs::create_dir_all(&dir)
            .map_err(|e| dist_err("file_store", format!("cannot create the store directory {}: {e}", dir.display())))?;
        Ok(Self { dir, timeout })
    }

    /// The directory the store lives in.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// How long `get`, `wait` and `add` wait before giving up.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn key_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("k.{}", escape(key)))
    }

    fn lock_path(&self, key: &str) -> PathBuf {
        self.dir.join(format!("l.{}", escape(key)))
    }

    /// Writes `value` to `path` through a temporary file and a rename.
    fn write_atomic(&self, op: &'static str, key: &str, path: &Path, value: &[u8]) -> Result<()> {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = self.dir.join(format!(".tmp-{}-{n}", std::process::id()));
        let res = fs::write(&tmp, value).and_then(|()| fs::rename(&tmp, path));
        res.map_err(|e| {
            let _ = fs::remove_file(&tmp);
            dist_err(op, format!("cannot write key `{key}` to {}: {e}", path.display()))
        })
    }

    /// Reads `path`: `None` while it does not exist.
    fn read(op: &'static str, key: &str, path: &Path) -> Result<Option<Vec<u8>>> {
        match fs::read(path) {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(dist_err(op, format!("cannot read key `{key}` from {}: {e}", path.display()))),
        }
    }

    /// Takes the lock file of `key`, polling until the timeout.
    fn lock(&self, op: &'static str, key: &str) -> Result<LockFile> {
        let path = self.lock_path(key);
        let deadline = Instant::now() + self.timeout;
        let mut poll = Poll::new();
        loop {
            let last = match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(_) => return Ok(LockFile(path)),
                // Windows answers PermissionDenied while another process deletes the file.
                Err(e) if matches!(e.kind(), io::ErrorKind::AlreadyExists | io::ErrorKind::PermissionDenied) => e,
                Err(e) => return Err(dist_err(op, format!("cannot create the lock {}: {e}", path.display()))),
            };
            if !poll.sleep(deadline) {
                return Err(dist_err(
                    op,
                    format!(
                        "could not take the lock {} of key `{key}` within {:?} ({last}): another process holds it, \
                         or one died holding it (then remove the file)",
                        path.display(),
                        self.timeout
                    ),
                ));
            }
        }
    }
}

impl Store for FileStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.write_atomic("store.set", key, &self.key_path(key), value)
    }

    fn get(&self, key: &str) -> Result<Vec<u8>> {
        let path = self.key_path(key);
        let deadline = Instant::now() + self.timeout;
        let mut poll = Poll::new();
        loop {
            if let Some(v) = Self::read("store.get", key, &path)? {
                return Ok(v);
            }
            if !poll.sleep(deadline) {
                return Err(dist_err(
                    "store.get",
                    format!("key `{key}` was not set within {:?} (no file {})", self.timeout, path.display()),
                ));
            }
        }
    }

    fn add(&self, key: &str, amount: i64) -> Result<i64> {
        const OP: &str = "store.add";
        let path = self.key_path(key);
        let _lock = self.lock(OP, key)?;
        let current = match Self::read(OP, key, &path)? {
            None => 0,
            Some(bytes) => {
                std::str::from_utf8(&bytes).ok().and_then(|s| s.trim().parse::<i64>().ok()).ok_or_else(|| {
                    dist_err(OP, format!("key `{key}` ({}) does not hold a decimal counter", path.display()))
                })?
            }
        };
        let new = current
            .checked_add(amount)
            .ok_or_else(|| dist_err(OP, format!("key `{key}`: {current} + {amount} overflows i64")))?;
        self.write_atomic(OP, key, &path, new.to_string().as_bytes())?;
        Ok(new)
    }

    fn wait(&self, keys: &[&str]) -> Result<()> {
        let deadline = Instant::now() + self.timeout;
        let mut poll = Poll::new();
        loop {
            let mut missing = Vec::new();
            for key in keys {
                if !self.key_path(key).exists() {
                    missing.push(*key);
                }
            }
            if missing.is_empty() {
                return Ok(());
            }
            if !poll.sleep(deadline) {
                return Err(dist_err(
                    "store.wait",
                    format!("keys {missing:?} were not set within {:?} (store {})", self.timeout, self.dir.display()),
                ));
            }
        }
    }
}

/// The lock file of one `add`, removed on drop.
struct LockFile(PathBuf);

impl Drop for LockFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}

/// Sleeps between polls: 100 µs at first, doubling up to [`MAX_POLL`].
struct Poll(Duration);

impl Poll {
    fn new() -> Self {
        Self(Duration::from_micros(100))
    }

    /// Sleeps until the next poll; false when `deadline` has passed.
    fn sleep(&mut self, deadline: Instant) -> bool {
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        thread::sleep(self.0.min(deadline - now));
        self.0 = (self.0 * 2).min(MAX_POLL);
        true
    }
}

/// `key` as a file name: `[A-Za-z0-9_-]` kept, every other byte `%XX`.
fn escape(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || b == b'_' || b == b'-' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn dist_err(op: &'static str, reason: String) -> Error {
    Error::Dist { op, reason }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn fresh_dir(name: &str) -> PathBuf {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        std::env::temp_dir().join(format!("locus-file-store-{name}-{}-{nanos}", std::process::id()))
    }

    #[test]
    fn set_get_overwrite_and_odd_keys() {
        let dir = fresh_dir("set-get");
        let s = FileStore::new(&dir, Duration::from_secs(5)).unwrap();
        for key in ["a", "addr/0", "../x", "", "k.l.%", "ü"] {
            s.set(key, key.as_bytes()).unwrap();
            assert_eq!(s.get(key).unwrap(), key.as_bytes(), "{key:?}");
        }
        s.set("a", b"second").unwrap();
        assert_eq!(s.get("a").unwrap(), b"second");
        s.set("empty", b"").unwrap();
        assert_eq!(s.get("empty").unwrap(), b"");
        // Every file stays inside the directory and no temporary file is left.
        for e in fs::read_dir(&dir).unwrap() {
            let name = e.unwrap().file_name().into_string().unwrap();
            assert!(name.starts_with("k."), "{name}");
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn get_and_wait_time_out_naming_the_key_and_path() {
        let dir = fresh_dir("timeout");
        let s = FileStore::new(&dir, Duration::from_millis(50)).unwrap();
        let t = Instant::now();
        let e = s.get("addr/3").unwrap_err().to_string();
        assert!(t.elapsed() >= Duration::from_millis(50));
        assert!(e.contains("store.get") && e.contains("addr/3") && e.contains(&dir.display().to_string()), "{e}");
        s.set("here", b"1").unwrap();
        let e = s.wait(&["here", "gone"]).unwrap_err().to_string();
        assert!(e.contains("store.wait") && e.contains("\"gone\"") && !e.contains("\"here\""), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn get_and_wait_see_a_value_set_later_by_another_thread() {
        let dir = fresh_dir("later");
        let s = Arc::new(FileStore::new(&dir, Duration::from_secs(10)).unwrap());
        let writer = {
            let s = Arc::clone(&s);
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(30));
                s.set("x", b"hello").unwrap();
                s.set("y", b"world").unwrap();
            })
        };
        assert_eq!(s.get("x").unwrap(), b"hello");
        s.wait(&["x", "y"]).unwrap();
        writer.join().unwrap();
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn add_counts_atomically_across_threads_and_stores() {
        let dir = fresh_dir("add");
        let (threads, per) = (4, 25);
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                // One store per thread, as separate processes would have.
                let s = FileStore::new(&dir, Duration::from_secs(20)).unwrap();
                thread::spawn(move || {
                    let mut seen = Vec::new();
                    for _ in 0..per {
                        seen.push(s.add("count", 1).unwrap());
                    }
                    seen
                })
            })
            .collect();
        let mut all: Vec<i64> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
        all.sort_unstable();
        // Every add saw a distinct value: no two read the same old count.
        assert_eq!(all, (1..=(threads * per) as i64).collect::<Vec<_>>());
        let s = FileStore::new(&dir, Duration::from_secs(1)).unwrap();
        assert_eq!(s.get("count").unwrap(), (threads * per).to_string().as_bytes());
        assert_eq!(s.add("count", -100).unwrap(), 0);
        assert_eq!(s.add("fresh", 0).unwrap(), 0);
        s.set("text", b"abc").unwrap();
        assert!(s.add("text", 1).unwrap_err().to_string().contains("decimal counter"));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn add_gives_up_on_a_lock_left_behind() {
        let dir = fresh_dir("stale");
        let s = FileStore::new(&dir, Duration::from_millis(50)).unwrap();
        fs::write(s.lock_path("n"), b"").unwrap();
        let e = s.add("n", 1).unwrap_err().to_string();
        assert!(e.contains("store.add") && e.contains("l.n") && e.contains("remove the file"), "{e}");
        fs::remove_file(s.lock_path("n")).unwrap();
        assert_eq!(s.add("n", 1).unwrap(), 1);
        fs::remove_dir_all(&dir).unwrap();
    }
}
