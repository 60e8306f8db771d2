//! [`ProcessGroup`]: collectives between processes over TCP, on host memory (the host
//! backend's way; PyTorch's Gloo group plays this part).

mod exchange;
mod mesh;
mod p2p;
mod reduce;
#[cfg(test)]
mod tests;
mod wire;

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use self::reduce::reduce;
use self::wire::{write_msg, Header, Kind};
use super::Store;
use crate::device::Device;
use crate::element::{DType, Element};
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// How [`ProcessGroup::all_reduce`] and [`ProcessGroup::reduce_scatter`] combine the
/// ranks' elements (PyTorch's `ReduceOp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// The sum (integers wrap on overflow).
    Sum,
    /// The sum divided by the world size (integers: the wrapping sum, divided with
    /// truncation).
    Avg,
    /// The largest element; NaN wins, as in `torch.max`.
    Max,
    /// The smallest element; NaN wins, as in `torch.min`.
    Min,
}

/// One process's membership in a group of `world_size` processes that exchange tensors
/// over TCP (PyTorch's `ProcessGroup`, here for host memory: the tensors are read with
/// `to_vec` and the results made with `from_vec_on` on the input's placement, so any
/// placement works, `Cpu`, `Cuda<N>` or `Dyn`).
///
/// [`new`](Self::new) meets the other ranks through a [`Store`]: each rank listens on a
/// port, publishes its address under `addr/{rank}`, and the ranks connect a full mesh
/// (rank `i` connects to every `j > i`; each connection begins with a hello carrying the
/// rank and the world size, and a world size that differs is an `Err` naming both ranks
/// and sizes). Use a fresh store (a fresh [`FileStore`](super::FileStore) directory) per
/// group: an address left by an earlier job is refused when its process answers with
/// another rank, but may make the rendezvous wait.
///
/// Every rank must call the same collectives in the same order, with tensors of the same
/// shape and element type; each message carries its collective, type and shape, and a
/// difference is an `Err` naming the ranks. Every socket read and write has the group's
/// timeout: a peer that exits makes the next collective fail at once, one that stops
/// answering makes it fail after the timeout, with [`Error::Dist`] naming the peer, never
/// a hang. After a failed exchange the group is broken: every later call returns the
/// same error (make a new group).
///
/// The algorithms are the simple ones, chosen for exact results: in
/// [`all_reduce`](Self::all_reduce) every rank sends its tensor to every other rank and
/// each reduces all of them in rank order, so every rank gets bit-identical results, equal
/// to a one-process loop over the ranks' tensors in rank order. That is `world_size - 1`
/// times the traffic of a ring; fine for tests and small jobs on one machine.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use std::sync::Arc;
/// use std::time::Duration;
/// use locus::dist::{FileStore, ProcessGroup, ReduceOp, Store};
/// use locus::{Cpu, Tensor};
/// let dir = std::env::temp_dir().join(format!("locus-doc-group-{}", std::process::id()));
/// # std::fs::remove_dir_all(&dir).ok();
/// let store: Arc<dyn Store> = Arc::new(FileStore::new(&dir, Duration::from_secs(10))?);
/// // Two ranks, here as two threads of one process.
/// let other = {
///     let store = Arc::clone(&store);
///     std::thread::spawn(move || -> locus::Result<Vec<f32>> {
///         let pg = ProcessGroup::new(store, 1, 2, Duration::from_secs(10))?;
///         pg.all_reduce(&Tensor::<Cpu>::from_vec(vec![10.0, 20.0], [2])?, ReduceOp::Sum)?.to_vec()
///     })
/// };
/// let pg = ProcessGroup::new(store, 0, 2, Duration::from_secs(10))?;
/// let sum = pg.all_reduce(&Tensor::<Cpu>::from_vec(vec![1.0, 2.0], [2])?, ReduceOp::Sum)?;
/// assert_eq!(sum.to_vec()?, vec![11.0, 22.0]);
/// assert_eq!(other.join().unwrap()?, vec![11.0, 22.0]);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), locus::Error>(())
/// ```
pub struct ProcessGroup {
    rank: usize,
    world_size: usize,
    timeout: Duration,
    state: Mutex<State>,
}

/// The connections, and the error that broke the group, if one did.
struct State {
    /// One per rank; `None` at this rank.
    links: Vec<Option<Link>>,
    broken: Option<Error>,
}

/// The connection to one peer, as two handles of one socket so that a thread can write
/// while another reads.
struct Link {
    read: TcpStream,
    write: TcpStream,
}

impl fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessGroup")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// The op name of errors from [`ProcessGroup::new`].
const NEW: &str = "process_group";

fn dist(op: &'static str, reason: impl Into<String>) -> Error {
    Error::Dist { op, reason: reason.into() }
}

/// What went wrong talking to `peer`, in words.
fn describe(peer: usize, e: &io::Error, timeout: Duration) -> String {
    use io::ErrorKind as K;
    match e.kind() {
        K::UnexpectedEof | K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => {
            format!("rank {peer} closed the connection ({e}): it exited, crashed or dropped its group")
        }
        K::WouldBlock | K::TimedOut => {
            format!("rank {peer} did not answer within {timeout:?}: it is stuck, or has not called this collective")
        }
        _ => format!("rank {peer}: {e}"),
    }
}

impl ProcessGroup {
    /// Joins the group as `rank` of `world_size`, meeting the others through `store`
    /// and listening on 127.0.0.1 (every rank on this machine). `timeout` bounds the
    /// rendezvous (beside the store's own waits) and every later socket read and write.
    pub fn new(store: Arc<dyn Store>, rank: usize, world_size: usize, timeout: Duration) -> Result<Self> {
        Self::with_address(store, rank, world_size, timeout, IpAddr::V4(Ipv4Addr::LOCALHOST))
    }

    /// [`new`](Self::new), listening on `ip`, the address of an interface the other
    /// ranks reach this machine at (it is what this rank publishes; `0.0.0.0` is refused).
    pub fn with_address(
        store: Arc<dyn Store>,
        rank: usize,
        world_size: usize,
        timeout: Duration,
        ip: IpAddr,
    ) -> Result<Self> {
        if world_size == 0 || rank >= world_size || world_size > u32::MAX as usize {
            return Err(dist(NEW, format!("rank {rank} is not in a world of {world_size} (ranks 0..{world_size})")));
        }
        if timeout.is_zero() {
            return Err(dist(NEW, "the timeout must be more than zero"));
        }
        if ip.is_unspecified() {
            return Err(dist(NEW, format!("{ip} cannot be published: give the address other ranks can reach")));
        }
        let links = mesh::connect(&*store, rank, world_size, timeout, ip)?;
        Ok(Self { rank, world_size, timeout, state: Mutex::new(State { links, broken: None }) })
    }

    /// This process's rank, `0..world_size`.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// How many processes the group has.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The timeout of every socket read and write.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The element-wise reduction of `t` over all ranks, on every rank (PyTorch's
    /// `all_reduce`), as a new tensor on `t`'s placement. Every rank sends its tensor to
    /// every other and reduces all of them in rank order, so the results are
    /// bit-identical on every rank. Shapes and types must agree (an `Err` names the
    /// ranks that differ).
    pub fn all_reduce<D: Device, T: Element>(&self, t: &Tensor<D, T>, op: ReduceOp) -> Result<Tensor<D, T>> {
        const OP: &str = "all_reduce";
        self.check_avg::<T>(OP, op)?;
        let data = t.to_vec()?;
        let want = Header::new(Kind::AllReduce, T::DTYPE, t.shape(), data.len());
        let mut parts = self.run(|s| self.exchange(s, OP, &want, |_| &data[..]))?;
        parts[self.rank] = data;
        let slices: Vec<&[T]> = parts.iter().map(|p| &p[..]).collect();
        Tensor::from_vec_on(t.placement(), reduce(op, &slices, self.world_size), t.shape())
    }

    /// `t` of rank `root`, on every rank (PyTorch's `broadcast`), as a new tensor on
    /// `t`'s placement. Every rank passes a tensor of the root's shape and type (only the
    /// root's elements are read); the root sends to each rank in turn.
    pub fn broadcast<D: Device, T: Element>(&self, t: &Tensor<D, T>, root: usize) -> Result<Tensor<D, T>> {
        const OP: &str = "broadcast";
        self.check_rank(OP, "root", root)?;
        let want = Header::new(Kind::Broadcast, T::DTYPE, t.shape(), t.numel());
        let data = if self.rank == root {
            let data = t.to_vec()?;
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
            data
        } else {
            self.run(|s| {
                let l = s.links[root].as_mut().expect("a link to every other rank");
                self.read_checked(OP, root, &mut l.read, &want, true).map_err(|r| dist(OP, r))
            })?
        };
        Tensor::from_vec_on(t.placement(), data, t.shape())
    }

    /// `t` of every rank, in rank order, on every rank (PyTorch's `all_gather`): one
    /// tensor per rank, each on `t`'s placement (this rank's a copy of `t`). Shapes and
    /// types must agree.
    pub fn all_gather<D: Device, T: Element>(&self, t: &Tensor<D, T>) -> Result<Vec<Tensor<D, T>>> {
        const OP: &str = "all_gather";
        let data = t.to_vec()?;
        let want = Header::new(Kind::AllGather, T::DTYPE, t.shape(), data.len());
        let mut parts = self.run(|s| self.exchange(s, OP, &want, |_| &data[..]))?;
        parts[self.rank] = data;
        parts.into_iter().map(|p| Tensor::from_vec_on(t.placement(), p, t.shape())).collect()
    }

    /// Rank `r`'s share of the reduction of `t` over all ranks (PyTorch's
    /// `reduce_scatter_tensor`): `t`'s first dim, a multiple of the world size, is cut in
    /// `world_size` equal chunks, and rank `r` gets chunk `r` reduced over the ranks in
    /// rank order, which equals that chunk of [`all_reduce`](Self::all_reduce) bit for
    /// bit. The result has `t`'s shape with the first dim divided by the world size.
    pub fn reduce_scatter<D: Device, T: Element>(&self, t: &Tensor<D, T>, op: ReduceOp) -> Result<Tensor<D, T>> {
        const OP: &str = "reduce_scatter";
        self.check_avg::<T>(OP, op)?;
        let shape = t.shape();
        if shape.is_empty() || shape[0] % self.world_size != 0 {
            return Err(Error::InvalidArgument {
                op: OP,
                reason: format!(
                    "shape {shape:?}: the first dim must be a multiple of the world size {}",
                    self.world_size
                ),
            });
        }
        let data = t.to_vec()?;
        let chunk = data.len() / self.world_size;
        let piece = |r: usize| &data[r * chunk..(r + 1) * chunk];
        let want = Header::new(Kind::ReduceScatter, T::DTYPE, shape, chunk);
        let mut parts = self.run(|s| self.exchange(s, OP, &want, piece))?;
        parts[self.rank] = piece(self.rank).to_vec();
        let slices: Vec<&[T]> = parts.iter().map(|p| &p[..]).collect();
        let mut out_shape = shape.to_vec();
        out_shape[0] /= self.world_size;
        Tensor::from_vec_on(t.placement(), reduce(op, &slices, self.world_size), out_shape)
    }

    /// Returns once every rank has called `barrier` (every rank sends a message to every
    /// other and waits for theirs).
    pub fn barrier(&self) -> Result<()> {
        const OP: &str = "barrier";
        let want = Header::new(Kind::Barrier, DType::U8, &[], 0);
        self.run(|s| self.exchange::<u8>(s, OP, &want, |_| &[]))?;
        Ok(())
    }

    fn check_rank(&self, op: &'static str, what: &str, r: usize) -> Result<()> {
        if r < self.world_size {
            Ok(())
        } else {
            Err(Error::InvalidArgument {
                op,
                reason: format!("{what} {r} is not a rank of this group (0..{})", self.world_size),
            })
        }
    }

    fn check_peer(&self, op: &'static str, what: &str, r: usize) -> Result<()> {
        self.check_rank(op, what, r)?;
        if r == self.rank {
            return Err(Error::InvalidArgument { op, reason: format!("{what} {r} is this rank itself") });
        }
        Ok(())
    }

    /// `Avg` needs the world size as a `T`.
    fn check_avg<T: Element>(&self, op: &'static str, r: ReduceOp) -> Result<()> {
        if r == ReduceOp::Avg && T::from_f64(self.world_size as f64).to_f64() != self.world_size as f64 {
            return Err(Error::InvalidArgument {
                op,
                reason: format!("ReduceOp::Avg over {} ranks does not fit in {}", self.world_size, T::DTYPE),
            });
        }
        Ok(())
    }
}
