//! The host: a thread that accepts connections, and one thread per connection that
//! answers its requests from the shared keys.

use std::collections::HashMap;
use std::io::{self, ErrorKind, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::lock;
use super::protocol::{
    put, read_array, read_bytes, read_count, read_key, read_keys, ADD, APPEND, CANCEL_WAIT, CHECK, COMPARE_SET,
    DELETE_KEY, GET, GETNUMKEYS, MAGIC, MAX_REPLY, MAX_VALUE, MULTI_GET, MULTI_SET, PING, SET, STOP_WAITING, VALIDATE,
    WAIT, WAIT_CANCELED,
};

/// The most connections served at once (a thread each): a peer that opens more gets
/// the new ones closed, not the host's threads and descriptors exhausted (fewer in tests).
pub(super) const MAX_CONNS: usize = if cfg!(test) { 256 } else { 16 << 10 };

/// The host's side: keys, waiters and the connections it serves.
#[derive(Default)]
struct Shared {
    keys: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
    stop: AtomicBool,
    /// The open connections by id, each removed when its thread ends.
    conns: Mutex<HashMap<u64, TcpStream>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("keys", &lock(&self.keys).len()).finish_non_exhaustive()
    }
}

#[derive(Debug)]
pub(super) struct Server {
    shared: Arc<Shared>,
    pub(super) local: SocketAddr,
    pub(super) world_size: usize,
    accept: Option<JoinHandle<()>>,
}

impl Server {
    /// Serves `listener`, bound at `local`, for `world_size` processes, from a thread of
    /// its own until dropped.
    /// An `Err` where the thread cannot be started. Named `locus-store-accept`, as every
    /// thread locus starts is named `locus-…` (the fault campaign counts them by name).
    pub(super) fn start(listener: TcpListener, local: SocketAddr, world_size: usize) -> io::Result<Server> {
        let shared = Arc::new(Shared::default());
        let accept = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("locus-store-accept".into())
                .spawn(move || accept_loop(listener, shared))?
        };
        Ok(Server { shared, local, world_size, accept: Some(accept) })
    }

    /// Where this machine reaches the listener (loopback when it listens everywhere).
    pub(super) fn connect_addr(&self) -> SocketAddr {
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
        for (_, c) in lock(&self.shared.conns).drain() {
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
    for (id, stream) in (0u64..).zip(listener.incoming()) {
        if shared.stop.load(Ordering::SeqCst) {
            break;
        }
        let Ok(stream) = stream else {
            // Out of descriptors, say: let connections end rather than spin.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        let _ = stream.set_nodelay(true);
        {
            let mut conns = lock(&shared.conns);
            if conns.len() >= MAX_CONNS {
                continue; // closes it
            }
            let Ok(clone) = stream.try_clone() else { continue };
            conns.insert(id, clone);
        }
        let sh = shared.clone();
        let spawned = std::thread::Builder::new().name("locus-store-conn".into()).spawn(move || {
            let _ = serve_conn(&stream, &sh);
            let _ = stream.shutdown(Shutdown::Both);
            lock(&sh.conns).remove(&id);
        });
        if spawned.is_err() {
            lock(&shared.conns).remove(&id); // no thread to serve it: closes it
        }
    }
}

#[cfg(test)]
impl Server {
    /// How many connections are being served.
    pub(super) fn open_conns(&self) -> usize {
        lock(&self.shared.conns).len()
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
            // The key is read before the lock is taken: a peer that stops mid-key must not
            // hold the keys from every other connection.
            GET => {
                let key = read_key(&mut s)?;
                put(&mut out, lock(&sh.keys).get(&key).map_or(&[][..], |v| v));
            }
            MULTI_GET => {
                let names = read_keys(&mut s)?;
                let keys = lock(&sh.keys);
                let size: u64 = names.iter().map(|k| 8 + keys.get(k).map_or(0, |v| v.len() as u64)).sum();
                if size > MAX_REPLY {
                    return Err(bad(format!("MULTI_GET of {} keys, a reply of {size} bytes", names.len())));
                }
                names.iter().for_each(|k| put(&mut out, keys.get(k).map_or(&[][..], |v| v)));
            }
            MULTI_SET => {
                for _ in 0..read_count(&mut s)? {
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
                let key = read_key(&mut s)?;
                let removed = lock(&sh.keys).remove(&key).is_some();
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
