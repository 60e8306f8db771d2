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
//!   This host and client: keys up to 64 KiB, values up to 1 GiB, 128 Ki keys a call
//!   (`protocol.rs`), replies up to 1 GiB, 16 Ki connections at once (`server.rs`); more
//!   is refused by closing the connection, and a length is not allocated before its bytes
//!   arrive (hostile peers are fuzzed in `fuzz.rs`).

#[cfg(test)]
mod fuzz;
mod protocol;
mod server;
#[cfg(test)]
mod tests;

use std::io::{self, ErrorKind, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use self::protocol::{
    put, read_array, read_bytes, ADD, CANCEL_WAIT, GET, INIT_KEY, KEY_PREFIX, MAGIC, MAX_VALUE, SET, STOP_WAITING,
    VALIDATE, WAIT,
};
use self::server::Server;
use crate::dist::Store;
use crate::error::{Error, Result};

fn dist(op: &'static str, reason: String) -> Error {
    Error::Dist { op, reason }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
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
        let server = Server::start(listener, local, world_size)
            .map_err(|e| dist("store.serve", format!("cannot start the store's thread for {addr}: {e}")))?;
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
