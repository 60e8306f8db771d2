//! The host-memory path of a [`ProcessGroup`](super::ProcessGroup): the ranks' elements
//! move over TCP between this process and every other, and the group's worker thread runs
//! the exchanges one after another, in the order they were asked for.

use std::net::TcpStream;
use std::sync::{mpsc, Mutex};
use std::thread;
use std::time::Duration;

use super::wire::{write_msg, Header, Kind};
use super::{describe, dist, ReduceOp};
use crate::element::{DType, Element};
use crate::error::{Error, Result};

/// The connections of one rank, and what it needs to talk over them.
pub(super) struct Tcp {
    pub(super) rank: usize,
    pub(super) world_size: usize,
    pub(super) timeout: Duration,
    pub(super) state: Mutex<State>,
}

/// The connections, and the error that broke the group, if one did.
pub(super) struct State {
    /// One per rank; `None` at this rank.
    pub(super) links: Vec<Option<Link>>,
    pub(super) broken: Option<Error>,
}

/// The connection to one peer, as two handles of one socket so that a thread can write
/// while another reads.
pub(super) struct Link {
    pub(super) read: TcpStream,
    pub(super) write: TcpStream,
}

/// Work for the group's worker thread.
pub(super) type Job = Box<dyn FnOnce() + Send>;

/// Starts the worker thread of rank `rank`'s group: it runs the jobs sent to it in order
/// and ends when the sender is dropped (with the group), after the jobs already sent.
pub(super) fn worker(rank: usize) -> Result<mpsc::Sender<Job>> {
    let (tx, rx) = mpsc::channel::<Job>();
    thread::Builder::new()
        .name(format!("locus-dist-{rank}"))
        .spawn(move || {
            for job in rx {
                job();
            }
        })
        .map_err(|e| Error::Thread { message: e.to_string() })?;
    Ok(tx)
}

impl Tcp {
    /// Every rank's `data` (of `shape`) reduced element-wise in rank order.
    pub(super) fn all_reduce<T: Element>(&self, data: Vec<T>, shape: &[usize], op: ReduceOp) -> Result<Vec<T>> {
        const OP: &str = "all_reduce";
        let want = Header::new(Kind::AllReduce, T::DTYPE, shape, data.len());
        let mut parts = self.run(|s| self.exchange(s, OP, &want, |_| &data[..]))?;
        parts[self.rank] = data;
        let slices: Vec<&[T]> = parts.iter().map(|p| &p[..]).collect();
        Ok(op.comm().reduce_in_order(&slices))
    }

    /// Rank `root`'s elements (`data`, read at the root only; `count` of `shape`).
    pub(super) fn broadcast<T: Element>(&self, data: Vec<T>, shape: &[usize], root: usize) -> Result<Vec<T>> {
        const OP: &str = "broadcast";
        let want = Header::new(Kind::Broadcast, T::DTYPE, shape, data.len());
        if self.rank != root {
            return self.run(|s| {
                let l = s.links[root].as_mut().expect("a link to every other rank");
                self.read_checked(OP, root, &mut l.read, &want, true).map_err(|r| dist(OP, r))
            });
        }
        let header = want.encode();
        let bytes: &[u8] = bytemuck::cast_slice(&data);
        self.run(|s| {
            let mut failures = Vec::new();
            for (peer, l) in s.links.iter_mut().enumerate() {
                let Some(l) = l else { continue };
                if let Err(e) = write_msg(&mut l.write, &header, bytes) {
                    failures.push(describe(peer, &e, self.timeout));
                }
            }
            if failures.is_empty() {
                Ok(())
            } else {
                Err(dist(OP, failures.join("; ")))
            }
        })?;
        Ok(data)
    }

    /// Every rank's `data`, by rank.
    pub(super) fn all_gather<T: Element>(&self, data: Vec<T>, shape: &[usize]) -> Result<Vec<Vec<T>>> {
        const OP: &str = "all_gather";
        let want = Header::new(Kind::AllGather, T::DTYPE, shape, data.len());
        let mut parts = self.run(|s| self.exchange(s, OP, &want, |_| &data[..]))?;
        parts[self.rank] = data;
        Ok(parts)
    }

    /// Chunk `rank` of the reduction of every rank's `data` (`shape`, cut in
    /// `world_size` equal chunks; the caller checked that it divides).
    pub(super) fn reduce_scatter<T: Element>(&self, data: Vec<T>, shape: &[usize], op: ReduceOp) -> Result<Vec<T>> {
        const OP: &str = "reduce_scatter";
        let chunk = data.len() / self.world_size;
        let piece = |r: usize| &data[r * chunk..(r + 1) * chunk];
        let want = Header::new(Kind::ReduceScatter, T::DTYPE, shape, chunk);
        let mut parts = self.run(|s| self.exchange(s, OP, &want, piece))?;
        parts[self.rank] = piece(self.rank).to_vec();
        let slices: Vec<&[T]> = parts.iter().map(|p| &p[..]).collect();
        Ok(op.comm().reduce_in_order(&slices))
    }

    /// Returns once every rank has sent this rank a barrier message.
    pub(super) fn barrier(&self) -> Result<()> {
        let want = Header::new(Kind::Barrier, DType::U8, &[], 0);
        self.run(|s| self.exchange::<u8>(s, "barrier", &want, |_| &[]))?;
        Ok(())
    }

    /// Sends `data` (of `shape`) to `dst`.
    pub(super) fn send<T: Element>(&self, data: &[T], shape: &[usize], dst: usize) -> Result<()> {
        const OP: &str = "send";
        let header = Header::new(Kind::Send, T::DTYPE, shape, data.len()).encode();
        self.run(|s| {
            let l = s.links[dst].as_mut().expect("a link to every other rank");
            write_msg(&mut l.write, &header, bytemuck::cast_slice(data))
                .map_err(|e| dist(OP, describe(dst, &e, self.timeout)))
        })
    }

    /// The `count` elements of `shape` that `src` sends.
    pub(super) fn recv<T: Element>(&self, src: usize, shape: &[usize], count: usize) -> Result<Vec<T>> {
        const OP: &str = "recv";
        let want = Header::new(Kind::Send, T::DTYPE, shape, count);
        self.run(|s| {
            let l = s.links[src].as_mut().expect("a link to every other rank");
            self.read_checked(OP, src, &mut l.read, &want, true).map_err(|r| dist(OP, r))
        })
    }
}
