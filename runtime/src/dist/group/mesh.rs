//! The rendezvous: each rank publishes its address in the [`Store`] and the ranks connect
//! a full mesh, checking each other's hello.

use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use super::wire::{hello, read_hello};
use super::{describe, dist, Link, NEW};
use crate::dist::Store;
use crate::error::Result;

/// The most bytes of a store value an error quotes.
const MAX_SHOWN: usize = 64;

/// Sets the group's options on a new connection and splits it into two handles.
fn link(s: TcpStream, timeout: Duration) -> io::Result<Link> {
    s.set_nonblocking(false)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    Ok(Link { write: s.try_clone()?, read: s })
}

/// Meets the other ranks through `store` as `rank` of `world_size`, listening on `ip`:
/// lower ranks connect to this one, this one connects to the higher ones. The links by
/// rank (`None` at this rank).
pub(super) fn connect(
    store: &dyn Store,
    rank: usize,
    world_size: usize,
    timeout: Duration,
    ip: IpAddr,
) -> Result<Vec<Option<Link>>> {
    let deadline = Instant::now() + timeout;
    let listener = TcpListener::bind((ip, 0)).map_err(|e| dist(NEW, format!("rank {rank}: bind {ip}: {e}")))?;
    let addr = listener.local_addr().map_err(|e| dist(NEW, format!("rank {rank}: local address: {e}")))?;
    store.set(&format!("addr/{rank}"), addr.to_string().as_bytes())?;
    let mut links: Vec<Option<Link>> = (0..world_size).map(|_| None).collect();

    // Lower ranks connect to this one. Each waits only for ranks below it, so the
    // rendezvous completes in rank order without a cycle.
    if rank > 0 {
        listener.set_nonblocking(true).map_err(|e| dist(NEW, format!("rank {rank}: listener: {e}")))?;
        let mut accepted = 0;
        while accepted < rank {
            let stream = match listener.accept() {
                Ok((s, _)) => s,
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted) => {
                    if Instant::now() >= deadline {
                        let missing: Vec<usize> = (0..rank).filter(|&r| links[r].is_none()).collect();
                        return Err(dist(
                            NEW,
                            format!("rank {rank}: ranks {missing:?} did not connect within {timeout:?}"),
                        ));
                    }
                    thread::sleep(Duration::from_millis(1));
                    continue;
                }
                Err(e) => return Err(dist(NEW, format!("rank {rank}: accept: {e}"))),
            };
            let mut l = link(stream, timeout).map_err(|e| dist(NEW, format!("rank {rank}: {e}")))?;
            let (peer, peer_world) = read_hello(&mut l.read)
                .map_err(|e| dist(NEW, format!("rank {rank}: a connecting process sent no valid hello: {e}")))?;
            // Answer first, so that the peer learns of a mismatch too.
            l.write
                .write_all(&hello(rank, world_size))
                .map_err(|e| dist(NEW, format!("rank {rank}: {}", describe(peer, &e, timeout))))?;
            if peer_world != world_size {
                return Err(dist(
                    NEW,
                    format!("rank {peer} has world size {peer_world} but rank {rank} has {world_size}"),
                ));
            }
            if peer >= rank || links[peer].is_some() {
                return Err(dist(NEW, format!("rank {rank}: a second or unexpected hello from rank {peer}")));
            }
            links[peer] = Some(l);
            accepted += 1;
        }
    }
    drop(listener);

    // This rank connects to the higher ones.
    for (peer, slot) in links.iter_mut().enumerate().skip(rank + 1) {
        let key = format!("addr/{peer}");
        let value = store.get(&key)?;
        let parsed: Option<SocketAddr> = std::str::from_utf8(&value).ok().and_then(|s| s.parse().ok());
        let Some(peer_addr) = parsed else {
            // Quotes the first bytes only: a broken store may hold a value of any size.
            let shown = String::from_utf8_lossy(&value[..value.len().min(MAX_SHOWN)]);
            let reason = format!("store key `{key}` holds {shown:?} ({} bytes), not an address", value.len());
            return Err(dist(NEW, reason));
        };
        let stream = loop {
            let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
            match TcpStream::connect_timeout(&peer_addr, left) {
                Ok(s) => break s,
                Err(e) if Instant::now() < deadline && e.kind() == io::ErrorKind::ConnectionRefused => {
                    thread::sleep(Duration::from_millis(5));
                }
                Err(e) => {
                    return Err(dist(NEW, format!("rank {rank}: cannot connect to rank {peer} at {peer_addr}: {e}")))
                }
            }
        };
        let mut l = link(stream, timeout).map_err(|e| dist(NEW, format!("rank {rank}: {e}")))?;
        let said = l.write.write_all(&hello(rank, world_size)).and_then(|()| read_hello(&mut l.read));
        let (who, peer_world) =
            said.map_err(|e| dist(NEW, format!("rank {rank}: hello to {peer_addr}: {}", describe(peer, &e, timeout))))?;
        if peer_world != world_size {
            return Err(dist(NEW, format!("rank {who} has world size {peer_world} but rank {rank} has {world_size}")));
        }
        if who != peer {
            return Err(dist(
                NEW,
                format!(
                    "`{key}` is {peer_addr}, but the process there says it is rank {who}: \
                     an address from an earlier job? use a fresh store"
                ),
            ));
        }
        *slot = Some(l);
    }
    Ok(links)
}
