//! [`TcpStore`]: a [`Store`] over TCP speaking PyTorch's `TCPStore` wire protocol, so a
//! locus process is a client of the store torchrun's agent hosts, and a locus rank 0 can
//! host a store that PyTorch clients (and locus ones) use.
//!
//! The protocol, as in pytorch/pytorch `torch/csrc/distributed/c10d/`: `TCPStore.cpp`
//! (client: `SendBuffer`, `TCPStore::{validate, set, doGet, doWait, incrementValueBy}`),
//! `TCPStoreBackend.hpp` (`QueryType`, `CheckResponseType`, `WaitResponseType`,
//! `validationMagicNumber`), `TCPStoreLibUvBackend.cpp` (the default server since torch
//! 2.4: `UvClient::processBuf` and its `parse_*_command`s), `TCPStoreBackend.cpp` (the
//! older single-thread `poll` server):
//!
//! - Integers are native-endian, which is little-endian on every platform torch ships: a
//!   command byte (`QueryType`, a `u8`), `u64` lengths and counts, `i64` for `ADD`, `u32`
//!   for the magic number and `PING`'s nonce. A string or byte vector is its `u64` length
//!   then its bytes, no terminator. A request is the command byte then its arguments; the
//!   client sends it in one buffer.
//! - `QueryType`: `VALIDATE`=0, `SET`=1, `COMPARE_SET`=2, `GET`=3, `ADD`=4, `CHECK`=5,
//!   `WAIT`=6, `GETNUMKEYS`=7, `DELETE_KEY`=8, `APPEND`=9, `MULTI_GET`=10, `MULTI_SET`=11,
//!   `CANCEL_WAIT`=12, `PING`=13 (later versions append queue commands after `PING`).
//! - Handshake: a new connection's first request must be `VALIDATE` `u32 0x3C85F7CE`
//!   (no reply); the libuv server ignores a connection that starts otherwise.
//! - `SET key value`: no reply. `GET key`: reply the value (empty when unset in the libuv
//!   server; the client always `WAIT`s for the key first). `ADD key i64`: the value is kept
//!   as decimal text, unset counts as 0; reply the new `i64`. `COMPARE_SET key expected
//!   desired`: reply the value after. `CHECK n keys..`: reply `u8` 0 (`READY`) or 1
//!   (`NOT_READY`). `GETNUMKEYS`: reply `i64`. `DELETE_KEY key`: reply `i64` removed count.
//!   `APPEND key bytes`: no reply. `MULTI_GET n keys..`: reply n values. `MULTI_SET n (key
//!   value)..`: no reply. `PING u32`: reply the same `u32`.
//! - `WAIT n keys..`: reply `u8` 0 (`STOP_WAITING`) once every key is set. A client that
//!   times out sends `CANCEL_WAIT`, and the server answers `u8` 1 (`WAIT_CANCELED`); a
//!   `STOP_WAITING` that crossed the cancel on the wire comes first and is skipped.
//! - Keys: the Python/C++ client prefixes every user key with `/` (`keyPrefix_`), so this
//!   client does too and the two see the same keys. On connecting, a torch client made
//!   with a world size `ADD`s 1 to the unprefixed `init/` key (`waitForWorkers`), and the
//!   host waits for that count to reach the world size; [`TcpStore`] does the same.
//! - Limits of the libuv server: keys up to 8 KiB, values up to 8 MiB, 128 Ki keys a call.

use super::Store;
use crate::error::{Error, Result};
use std::collections::HashMap;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const MAGIC: u32 = 0x3C85_F7CE;
const VALIDATE: u8 = 0;
const SET: u8 = 1;
const COMPARE_SET: u8 = 2;
const GET: u8 = 3;
const ADD: u8 = 4;
const CHECK: u8 = 5;
const WAIT: u8 = 6;
const GETNUMKEYS: u8 = 7;
const DELETE_KEY: u8 = 8;
const APPEND: u8 = 9;
const MULTI_GET: u8 = 10;
const MULTI_SET: u8 = 11;
const CANCEL_WAIT: u8 = 12;
const PING: u8 = 13;
const STOP_WAITING: u8 = 0;
const WAIT_CANCELED: u8 = 1;
const KEY_PREFIX: &str = "/";
const INIT_KEY: &str = "init/";
/// What this server accepts (more than torch's libuv server) and this client reads.
const MAX_KEY: u64 = 64 << 10;
const MAX_VALUE: u64 = 1 << 30;
const MAX_KEYS: u64 = 128 << 10;

fn dist(op: &'static str, reason: String) -> Error {
    Error::Dist { op, reason }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn put(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    buf.extend_from_slice(bytes);
}

fn read_array<const N: usize>(r: &mut impl Read) -> io::Result<[u8; N]> {
    let mut b = [0; N];
    r.read_exact(&mut b)?;
    Ok(b)
}

fn read_u64(r: &mut impl Read) -> io::Result<u64> {
    read_array(r).map(u64::from_le_bytes)
}

fn read_bytes(r: &mut impl Read, max: u64) -> io::Result<Vec<u8>> {
    let n = read_u64(r)?;
    if n > max {
        return Err(io::Error::new(ErrorKind::InvalidData, format!("a length of {n} bytes, over {max}")));
    }
    let mut v = vec![0; n as usize];
    r.read_exact(&mut v)?;
    Ok(v)
}

fn read_key(r: &mut impl Read) -> io::Result<String> {
    String::from_utf8(read_bytes(r, MAX_KEY)?).map_err(|e| io::Error::new(ErrorKind::InvalidData, e))
}

fn read_keys(r: &mut impl Read) -> io::Result<Vec<String>> {
    let n = read_u64(r)?;
    if n > MAX_KEYS {
        return Err(io::Error::new(ErrorKind::InvalidData, format!("{n} keys in one call")));
    }
    (0..n).map(|_| read_key(r)).collect()
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut)
}

/// A client of a PyTorch-compatible TCP store, and its host when made by
/// [`TcpStore::serve`]. Every call gives up after the store's timeout.
#[derive(Debug)]
pub struct TcpStore {
    addr: String,
    timeout: Duration,
    conn: Mutex<TcpStream>,
    server: Option<Server>,
}

impl TcpStore {
    /// Connects to the store at `addr` (`host:port`), retrying until `timeout` while the
    /// host is not up yet, then validates the connection and counts itself in `init/`.
    /// Under torchrun this is `TcpStore::connect(&format!("{MASTER_ADDR}:{MASTER_PORT}"), ..)`.
    pub fn connect(addr: &str, timeout: Duration) -> Result<TcpStore> {
        if timeout.is_zero() {
            return Err(dist("store.connect", format!("a zero timeout for the store at {addr}")));
        }
        let stream = connect_retry(addr, timeout)?;
        let io_err = |e: io::Error| dist("store.connect", format!("store at {addr}: {e}"));
        stream.set_nodelay(true).map_err(io_err)?;
        stream.set_read_timeout(Some(timeout)).map_err(io_err)?;
        stream.set_write_timeout(Some(timeout)).map_err(io_err)?;
        let mut hello = vec![VALIDATE];
        hello.extend_from_slice(&MAGIC.to_le_bytes());
        (&stream).write_all(&hello).map_err(io_err)?;
        let store = TcpStore { addr: addr.to_string(), timeout, conn: Mutex::new(stream), server: None };
        store.raw_add("store.connect", INIT_KEY, 1)?;
        Ok(store)
    }

    /// Hosts a store on `addr` (`0.0.0.0:29500` for every interface, port 0 for any free
    /// port) for `world_size` processes, itself included, and connects to it. A port in
    /// use is an `Err` naming the address. The store lives as long as the returned value.
    pub fn serve(addr: &str, world_size: usize, timeout: Duration) -> Result<TcpStore> {
        if world_size == 0 {
            return Err(dist("store.serve", format!("a world size of 0 for the store at {addr}")));
        }
        let listener =
            TcpListener::bind(addr).map_err(|e| dist("store.serve", format!("cannot listen on {addr}: {e}")))?;
        let local = listener.local_addr().map_err(|e| dist("store.serve", format!("{addr}: {e}")))?;
        let shared = Arc::new(Shared::default());
        let accept = {
            let shared = shared.clone();
            std::thread::spawn(move || accept_loop(listener, shared))
        };
        let server = Server { shared, local, world_size, accept: Some(accept) };
        let mut store = TcpStore::connect(&server.connect_addr().to_string(), timeout)?;
        store.server = Some(server);
        Ok(store)
    }

    /// The address the host listens on, with the port it bound; `None` on a client.
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.server.as_ref().map(|s| s.local)
    }

    /// On the host: waits until `world_size` processes (itself included) have connected,
    /// an `Err` naming how many did after the timeout. On a client: returns at once.
    pub fn wait_for_workers(&self) -> Result<()> {
        let Some(world_size) = self.server.as_ref().map(|s| s.world_size) else { return Ok(()) };
        let deadline = Instant::now() + self.timeout;
        loop {
            let joined = self.raw_add("store.wait_for_workers", INIT_KEY, 0)?;
            if joined >= world_size as i64 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(dist(
                    "store.wait_for_workers",
                    format!(
                        "{joined} of {world_size} processes joined the store at {} in {:?}",
                        self.addr, self.timeout
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Sends `msg`, then reads the reply with `reply` under the connection's lock.
    fn call<T>(&self, op: &'static str, msg: &[u8], reply: impl FnOnce(&mut TcpStream) -> io::Result<T>) -> Result<T> {
        let mut conn = lock(&self.conn);
        conn.write_all(msg).and_then(|()| reply(&mut conn)).map_err(|e| {
            let e = if is_timeout(&e) { format!("no reply in {:?}", self.timeout) } else { e.to_string() };
            dist(op, format!("store at {}: {e}", self.addr))
        })
    }

    fn raw_add(&self, op: &'static str, key: &str, amount: i64) -> Result<i64> {
        let mut msg = vec![ADD];
        put(&mut msg, key.as_bytes());
        msg.extend_from_slice(&amount.to_le_bytes());
        self.call(op, &msg, |c| read_array(c).map(i64::from_le_bytes))
    }

    /// Waits for `keys` (already prefixed); on the timeout cancels the wait as torch does.
    fn raw_wait(&self, op: &'static str, keys: &[String]) -> Result<()> {
        let mut msg = vec![WAIT];
        msg.extend_from_slice(&(keys.len() as u64).to_le_bytes());
        keys.iter().for_each(|k| put(&mut msg, k.as_bytes()));
        let timed_out = self.call(op, &msg, |c| match read_array::<1>(c) {
            Ok([STOP_WAITING]) => Ok(false),
            Ok([b]) => Err(io::Error::new(ErrorKind::InvalidData, format!("wait answered {b}"))),
            Err(e) if is_timeout(&e) => {
                c.write_all(&[CANCEL_WAIT])?;
                if read_array::<1>(c)? == [STOP_WAITING] {
                    read_array::<1>(c)?; // the WAIT_CANCELED behind a late STOP_WAITING
                }
                Ok(true)
            }
            Err(e) => Err(e),
        })?;
        if timed_out {
            let keys: Vec<&str> = keys.iter().map(|k| k.strip_prefix(KEY_PREFIX).unwrap_or(k)).collect();
            return Err(dist(
                op,
                format!("keys {keys:?} not set in the store at {} within {:?}", self.addr, self.timeout),
            ));
        }
        Ok(())
    }
}

impl Store for TcpStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        let mut msg = vec![SET];
        put(&mut msg, format!("{KEY_PREFIX}{key}").as_bytes());
        put(&mut msg, value);
        self.call("store.set", &msg, |_| Ok(()))
    }

    fn get(&self, key: &str) -> Result<Vec<u8>> {
        let key = format!("{KEY_PREFIX}{key}");
        self.raw_wait("store.get", std::slice::from_ref(&key))?;
        let mut msg = vec![GET];
        put(&mut msg, key.as_bytes());
        self.call("store.get", &msg, |c| read_bytes(c, MAX_VALUE))
    }

    fn add(&self, key: &str, amount: i64) -> Result<i64> {
        self.raw_add("store.add", &format!("{KEY_PREFIX}{key}"), amount)
    }

    fn wait(&self, keys: &[&str]) -> Result<()> {
        let keys: Vec<String> = keys.iter().map(|k| format!("{KEY_PREFIX}{k}")).collect();
        self.raw_wait("store.wait", &keys)
    }
}

fn connect_retry(addr: &str, timeout: Duration) -> Result<TcpStream> {
    let deadline = Instant::now() + timeout;
    let mut delay = Duration::from_millis(10);
    loop {
        let last = match addr.to_socket_addrs() {
            Ok(addrs) => {
                let mut last = format!("{addr} resolves to no address");
                for a in addrs {
                    let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
                    match TcpStream::connect_timeout(&a, left.min(Duration::from_secs(1))) {
                        Ok(s) => return Ok(s),
                        Err(e) => last = format!("{a}: {e}"),
                    }
                }
                last
            }
            Err(e) => e.to_string(),
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(dist("store.connect", format!("no store at {addr} after {timeout:?} ({last})")));
        }
        std::thread::sleep(delay.min(left));
        delay = (delay * 2).min(Duration::from_secs(1));
    }
}

/// The host's side: keys, waiters and the connections it serves.
#[derive(Default)]
struct Shared {
    keys: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
    stop: AtomicBool,
    conns: Mutex<Vec<TcpStream>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("keys", &lock(&self.keys).len()).finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Server {
    shared: Arc<Shared>,
    local: SocketAddr,
    world_size: usize,
    accept: Option<JoinHandle<()>>,
}

impl Server {
    /// Where this machine reaches the listener (loopback when it listens everywhere).
    fn connect_addr(&self) -> SocketAddr {
        match self.local.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => SocketAddr::new(Ipv4Addr::LOCALHOST.into(), self.local.port()),
            IpAddr::V6(ip) if ip.is_unspecified() => SocketAddr::new(Ipv6Addr::LOCALHOST.into(), self.local.port()),
            _ => self.local,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.changed.notify_all();
        for c in lock(&self.shared.conns).drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
        // Wakes the accept loop, which sees `stop` and ends.
        let _ = TcpStream::connect_timeout(&self.connect_addr(), Duration::from_secs(1));
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for stream in listener.incoming() {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else { continue };
        let _ = stream.set_nodelay(true);
        if let Ok(clone) = stream.try_clone() {
            lock(&shared.conns).push(clone);
        }
        let shared = shared.clone();
        std::thread::spawn(move || {
            let _ = serve_conn(&stream, &shared);
            let _ = stream.shutdown(Shutdown::Both);
        });
    }
}

/// Answers one connection's requests until it closes or sends something malformed.
fn serve_conn(mut s: &TcpStream, sh: &Shared) -> io::Result<()> {
    let bad = |what: String| io::Error::new(ErrorKind::InvalidData, what);
    if read_array::<1>(&mut s)? != [VALIDATE] || read_array(&mut s).map(u32::from_le_bytes)? != MAGIC {
        return Err(bad("no VALIDATE handshake".into()));
    }
    loop {
        let [cmd] = match read_array::<1>(&mut s) {
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => return Ok(()),
            r => r?,
        };
        if sh.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut out = Vec::new();
        match cmd {
            SET | APPEND => {
                let (key, value) = (read_key(&mut s)?, read_bytes(&mut s, MAX_VALUE)?);
                let mut keys = lock(&sh.keys);
                match keys.get_mut(&key) {
                    Some(v) if cmd == APPEND => v.extend_from_slice(&value),
                    _ => drop(keys.insert(key, value)),
                }
                sh.changed.notify_all();
            }
            COMPARE_SET => {
                let (key, expected) = (read_key(&mut s)?, read_bytes(&mut s, MAX_VALUE)?);
                let desired = read_bytes(&mut s, MAX_VALUE)?;
                let mut keys = lock(&sh.keys);
                let now = match keys.get_mut(&key) {
                    None if expected.is_empty() => keys.entry(key).or_insert(desired).clone(),
                    None => expected,
                    Some(v) if *v == expected => {
                        *v = desired;
                        v.clone()
                    }
                    Some(v) => v.clone(),
                };
                sh.changed.notify_all();
                put(&mut out, &now);
            }
            GET => put(&mut out, lock(&sh.keys).get(&read_key(&mut s)?).map_or(&[][..], |v| v)),
            MULTI_GET => {
                let names = read_keys(&mut s)?;
                let keys = lock(&sh.keys);
                names.iter().for_each(|k| put(&mut out, keys.get(k).map_or(&[][..], |v| v)));
            }
            MULTI_SET => {
                for _ in 0..read_u64(&mut s)?.min(MAX_KEYS) {
                    let (key, value) = (read_key(&mut s)?, read_bytes(&mut s, MAX_VALUE)?);
                    lock(&sh.keys).insert(key, value);
                }
                sh.changed.notify_all();
            }
            ADD => {
                let key = read_key(&mut s)?;
                let delta = i64::from_le_bytes(read_array(&mut s)?);
                let mut keys = lock(&sh.keys);
                let old = match keys.get(&key) {
                    None => 0,
                    Some(v) => std::str::from_utf8(v)
                        .ok()
                        .and_then(|t| t.parse::<i64>().ok())
                        .ok_or_else(|| bad(format!("ADD to {key:?}, not a number")))?,
                };
                let new = old.checked_add(delta).ok_or_else(|| bad(format!("ADD overflows {key:?}")))?;
                keys.insert(key, new.to_string().into_bytes());
                sh.changed.notify_all();
                out.extend_from_slice(&new.to_le_bytes());
            }
            CHECK => {
                let names = read_keys(&mut s)?;
                let keys = lock(&sh.keys);
                out.push(u8::from(!names.iter().all(|k| keys.contains_key(k))));
            }
            WAIT => {
                if wait_keys(s, sh, &read_keys(&mut s)?)? {
                    out.push(STOP_WAITING);
                } // else a CANCEL_WAIT is next on the wire
            }
            GETNUMKEYS => out.extend_from_slice(&(lock(&sh.keys).len() as i64).to_le_bytes()),
            DELETE_KEY => {
                let removed = lock(&sh.keys).remove(&read_key(&mut s)?).is_some();
                out.extend_from_slice(&i64::from(removed).to_le_bytes());
            }
            CANCEL_WAIT => out.push(WAIT_CANCELED),
            PING => out.extend_from_slice(&read_array::<4>(&mut s)?),
            other => return Err(bad(format!("unknown command {other}"))),
        }
        if !out.is_empty() {
            s.write_all(&out)?;
        }
    }
}

/// Blocks until every key is set (`true`) or the client sends something, a `CANCEL_WAIT`
/// (`false`); a closed connection or a stopped server is an `Err`.
fn wait_keys(s: &TcpStream, sh: &Shared, names: &[String]) -> io::Result<bool> {
    let mut keys = lock(&sh.keys);
    loop {
        if names.iter().all(|k| keys.contains_key(k)) {
            return Ok(true);
        }
        if sh.stop.load(Ordering::SeqCst) {
            return Err(io::Error::other("the store stopped"));
        }
        keys = sh.changed.wait_timeout(keys, Duration::from_millis(50)).unwrap_or_else(PoisonError::into_inner).0;
        s.set_nonblocking(true)?;
        let peeked = s.peek(&mut [0]);
        s.set_nonblocking(false)?;
        match peeked {
            Ok(0) => return Err(ErrorKind::UnexpectedEof.into()),
            Ok(_) => return Ok(false),
            Err(e) if e.kind() == ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(10);

    fn host(world_size: usize, timeout: Duration) -> (TcpStore, String) {
        let store = TcpStore::serve("127.0.0.1:0", world_size, timeout).unwrap();
        let addr = store.local_addr().unwrap().to_string();
        (store, addr)
    }

    fn reason(r: Result<impl std::fmt::Debug>) -> String {
        match r {
            Err(Error::Dist { reason, .. }) => reason,
            other => panic!("expected a dist error, got {other:?}"),
        }
    }

    #[test]
    fn clients_meet() {
        let (store, addr) = host(4, T);
        let workers: Vec<_> = (1..4)
            .map(|rank| {
                let addr = addr.clone();
                std::thread::spawn(move || {
                    let c = TcpStore::connect(&addr, T).unwrap();
                    c.set(&format!("rank{rank}"), format!("hello {rank}").as_bytes()).unwrap();
                    c.add("count", 1).unwrap();
                    c.wait(&["rank1", "rank2", "rank3"]).unwrap();
                    (1..4).map(|r| c.get(&format!("rank{r}")).unwrap()).collect::<Vec<_>>()
                })
            })
            .collect();
        store.wait_for_workers().unwrap();
        for w in workers {
            assert_eq!(w.join().unwrap(), [b"hello 1".to_vec(), b"hello 2".to_vec(), b"hello 3".to_vec()]);
        }
        assert_eq!(store.add("count", 0).unwrap(), 3);
        assert_eq!(store.add("count", -5).unwrap(), -2);
        store.set("k", b"v1").unwrap();
        store.set("k", b"v2").unwrap();
        assert_eq!(store.get("k").unwrap(), b"v2");
    }

    #[test]
    fn get_waits_for_a_later_set() {
        let (store, addr) = host(1, T);
        let start = Instant::now();
        let setter = std::thread::spawn(move || {
            let c = TcpStore::connect(&addr, T).unwrap();
            std::thread::sleep(Duration::from_millis(200));
            c.set("late", b"here").unwrap();
        });
        assert_eq!(store.get("late").unwrap(), b"here");
        assert!(start.elapsed() >= Duration::from_millis(150));
        setter.join().unwrap();
    }

    #[test]
    fn timeouts_are_errors_and_the_store_stays_usable() {
        let (store, _addr) = host(1, Duration::from_millis(300));
        let start = Instant::now();
        let r = reason(store.get("never"));
        assert!(r.contains("\"never\"") && r.contains("within"), "{r}");
        assert!(start.elapsed() < Duration::from_secs(3), "{:?}", start.elapsed());
        assert!(reason(store.wait(&["a", "b"])).contains("\"a\", \"b\""));
        store.set("after", b"ok").unwrap(); // the cancelled waits left the connection in step
        assert_eq!(store.get("after").unwrap(), b"ok");
        store.wait_for_workers().unwrap();
    }

    #[test]
    fn too_few_workers() {
        let (store, _addr) = host(3, Duration::from_millis(200));
        assert!(reason(store.wait_for_workers()).contains("1 of 3 processes joined"));
    }

    #[test]
    fn unreachable_and_port_in_use() {
        let taken = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap().to_string();
        let r = reason(TcpStore::serve(&addr, 1, T));
        assert!(r.contains(&addr) && r.contains("cannot listen"), "{r}");
        drop(taken);
        let start = Instant::now();
        let r = reason(TcpStore::connect(&addr, Duration::from_millis(300)));
        assert!(r.contains(&addr) && r.contains("no store"), "{r}");
        assert!((Duration::from_millis(300)..Duration::from_secs(3)).contains(&start.elapsed()));
    }

    /// The bytes on the wire, as torch's client writes and reads them.
    #[test]
    fn wire_format() {
        let (store, addr) = host(1, T);
        store.set("x", b"42").unwrap();
        store.get("x").unwrap(); // a set has no reply: this makes sure the host has it
        let mut s = TcpStream::connect(&addr).unwrap();
        let mut msg = vec![0, 0xCE, 0xF7, 0x85, 0x3C]; // VALIDATE, magic
        msg.extend([3, 2, 0, 0, 0, 0, 0, 0, 0, b'/', b'x']); // GET "/x"
        msg.extend([4, 2, 0, 0, 0, 0, 0, 0, 0, b'/', b'x', 8, 0, 0, 0, 0, 0, 0, 0]); // ADD "/x" 8
        msg.extend([6, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, b'/', b'x']); // WAIT ["/x"]
        msg.extend([13, 7, 0, 0, 0, 7, 0, 0, 0]); // PING 7, GETNUMKEYS
        s.write_all(&msg).unwrap();
        let mut reply = [0; 8 + 2 + 8 + 1 + 4 + 8];
        s.read_exact(&mut reply).unwrap();
        assert_eq!(&reply[..10], &[2, 0, 0, 0, 0, 0, 0, 0, b'4', b'2']);
        assert_eq!(i64::from_le_bytes(reply[10..18].try_into().unwrap()), 50);
        assert_eq!(reply[18], STOP_WAITING);
        assert_eq!(&reply[19..23], &[7, 0, 0, 0]);
        assert_eq!(i64::from_le_bytes(reply[23..].try_into().unwrap()), 2); // "init/" and "/x"
        assert_eq!(store.get("x").unwrap(), b"50");
    }
}
