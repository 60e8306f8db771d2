//! [`ProcessGroup`]: collectives between processes. Tensors in host memory, and every
//! tensor on the host backend, move over TCP (`tcp.rs`, PyTorch's Gloo group plays this
//! part); tensors on the group's device of the cuda backend go through the backend's
//! communicator, NCCL (`comm.rs`).

mod engine;
mod exchange;
#[cfg(test)]
mod fuzz;
mod mesh;
mod p2p;
mod tcp;
#[cfg(test)]
mod tests;
mod wire;

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::Duration;

use self::engine::Engine;
use self::tcp::{Job, Link, State, Tcp};
use super::{Store, Work};
use crate::backend::{CommOp, CommReduce};
use crate::device::{Device, DeviceId, Dyn};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::shape::Shape;
use crate::stream::Stream;
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
    tcp: Arc<Tcp>,
    /// The worker that runs the TCP exchanges in order (see `tcp.rs`).
    jobs: Mutex<mpsc::Sender<Job>>,
    store: Arc<dyn Store>,
    /// The device this rank's device tensors live on, and how they move.
    device: Option<(DeviceId, Engine)>,
    /// The stream of the `_async` collectives on the communicator, made on first use.
    side: OnceLock<Stream<Dyn>>,
}

impl fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessGroup")
            .field("rank", &self.rank)
            .field("world_size", &self.world_size)
            .field("device", &self.device.as_ref().map(|(d, e)| (d, e.name())))
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

/// How a tensor's collective runs.
enum Route<'a> {
    /// Through host memory, over TCP.
    Tcp,
    /// On the backend's communicator.
    Comm(&'a crate::backend::AnyComm),
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
        let tcp = Arc::new(Tcp { rank, world_size, timeout, state: Mutex::new(State { links, broken: None }) });
        Ok(Self {
            rank,
            world_size,
            timeout,
            tcp,
            jobs: Mutex::new(tcp::worker(rank)?),
            store,
            device: None,
            side: OnceLock::new(),
        })
    }

    /// Binds the group to this rank's device (a `cuda:N` of the selected backend, which
    /// must exist): the collectives of tensors on `device` then run on the backend's
    /// communicator, NCCL on the cuda backend, when every rank has one (the ranks agree
    /// through the store, so all use NCCL or none does), and over TCP otherwise (the host
    /// backend). Tensors on another device are an `Err` naming both; host tensors still
    /// move over TCP. Every rank calls it, with its own device; NCCL wants a distinct
    /// device per rank of one machine.
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// # use std::sync::Arc;
    /// # use std::time::Duration;
    /// use locus::dist::{FileStore, ProcessGroup, ReduceOp, Store};
    /// use locus::{Cuda, DeviceId, Tensor};
    /// let dir = std::env::temp_dir().join(format!("locus-doc-bind-{}", std::process::id()));
    /// # std::fs::remove_dir_all(&dir).ok();
    /// let store: Arc<dyn Store> = Arc::new(FileStore::new(&dir, Duration::from_secs(10))?);
    /// let pg = ProcessGroup::new(store, 0, 1, Duration::from_secs(10))?.with_device(DeviceId::Cuda(0))?;
    /// assert_eq!(pg.device(), Some(DeviceId::Cuda(0)));
    /// let sum = pg.all_reduce(&Tensor::<Cuda<0>>::ones([2])?, ReduceOp::Sum)?;
    /// assert_eq!(sum.to_vec()?, vec![1.0; 2]);
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn with_device(mut self, device: DeviceId) -> Result<Self> {
        if self.device.is_some() {
            return Err(dist("with_device", format!("the group of rank {} is already bound to a device", self.rank)));
        }
        if device.ordinal().is_none() {
            return Err(dist("with_device", format!("{device} is host memory; a group binds to a `cuda:N` device")));
        }
        let engine = engine::engine(&*self.store, self.rank, self.world_size, Some(device), self.timeout)?;
        self.device = Some((device, engine));
        Ok(self)
    }

    /// Takes part in the other ranks' [`with_device`](Self::with_device) with no device
    /// of its own (so that they all use TCP).
    pub(crate) fn without_device(self) -> Result<Self> {
        engine::engine(&*self.store, self.rank, self.world_size, None, self.timeout)?;
        Ok(self)
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

    /// The device the group is bound to ([`with_device`](Self::with_device)).
    pub fn device(&self) -> Option<DeviceId> {
        self.device.as_ref().map(|(d, _)| *d)
    }

    /// Whether the collectives of the group's device run on the backend's communicator
    /// (NCCL) rather than over TCP.
    pub fn uses_communicator(&self) -> bool {
        matches!(self.device, Some((_, Engine::Comm(_))))
    }

    /// The element-wise reduction of `t` over all ranks, on every rank (PyTorch's
    /// `all_reduce`), as a new tensor on `t`'s placement. Over TCP every rank sends its
    /// tensor to every other and reduces all of them in rank order, so the results are
    /// bit-identical on every rank and equal a one-process loop over the ranks in rank
    /// order; NCCL reduces in its own order (floating-point sums may differ in the last
    /// bits). Shapes and types must agree (over TCP an `Err` names the ranks that differ;
    /// NCCL does not check). On a communicator the collective is queued on the thread's
    /// current stream, like any op.
    pub fn all_reduce<D: Device, T: Element>(&self, t: &Tensor<D, T>, op: ReduceOp) -> Result<Tensor<D, T>> {
        const OP: &str = "all_reduce";
        self.check_avg::<T>(OP, op)?;
        match self.route(OP, t)? {
            Route::Comm(c) => self.comm_all_reduce(c, t, op),
            Route::Tcp => self.tcp_all_reduce(t, op)?.wait(),
        }
    }

    /// [`all_reduce`](Self::all_reduce) started without waiting: on the group's
    /// communication stream, or on its worker thread over TCP (see [`Work`]).
    ///
    /// ```
    /// # extern crate locus_runtime as locus;
    /// # use std::sync::Arc;
    /// # use std::time::Duration;
    /// use locus::dist::{FileStore, ProcessGroup, ReduceOp, Store};
    /// use locus::{Cpu, Tensor};
    /// let dir = std::env::temp_dir().join(format!("locus-doc-async-{}", std::process::id()));
    /// # std::fs::remove_dir_all(&dir).ok();
    /// let store: Arc<dyn Store> = Arc::new(FileStore::new(&dir, Duration::from_secs(10))?);
    /// let pg = ProcessGroup::new(store, 0, 1, Duration::from_secs(10))?;
    /// let work = pg.all_reduce_async(&Tensor::<Cpu>::full([2], 3.0)?, ReduceOp::Max)?;
    /// // ... more work here, while the exchange runs ...
    /// assert_eq!(work.wait()?.to_vec()?, vec![3.0; 2]);
    /// # std::fs::remove_dir_all(&dir).ok();
    /// # Ok::<(), locus::Error>(())
    /// ```
    pub fn all_reduce_async<D: Device, T: Element>(
        &self,
        t: &Tensor<D, T>,
        op: ReduceOp,
    ) -> Result<Work<Tensor<D, T>>> {
        const OP: &str = "all_reduce";
        self.check_avg::<T>(OP, op)?;
        match self.route(OP, t)? {
            Route::Comm(c) => self.on_side(|| self.comm_all_reduce(c, t, op)),
            Route::Tcp => self.tcp_all_reduce(t, op),
        }
    }

    fn tcp_all_reduce<D: Device, T: Element>(&self, t: &Tensor<D, T>, op: ReduceOp) -> Result<Work<Tensor<D, T>>> {
        let t = t.clone();
        self.submit(move |tcp| {
            let out = tcp.all_reduce(t.to_vec()?, t.shape(), op)?;
            Tensor::from_vec_on(t.placement(), out, t.shape())
        })
    }

    fn comm_all_reduce<D: Device, T: Element>(
        &self,
        c: &crate::backend::AnyComm,
        t: &Tensor<D, T>,
        op: ReduceOp,
    ) -> Result<Tensor<D, T>> {
        self.comm_reduce(c, t, op, t.checked_shape().clone(), |buf, op| CommOp::AllReduce { buf, op })
    }

    /// `t` of rank `root`, on every rank (PyTorch's `broadcast`), as a new tensor on
    /// `t`'s placement. Every rank passes a tensor of the root's shape and type (only the
    /// root's elements are read).
    pub fn broadcast<D: Device, T: Element>(&self, t: &Tensor<D, T>, root: usize) -> Result<Tensor<D, T>> {
        self.broadcast_work(t, root, false)?.wait()
    }

    /// [`broadcast`](Self::broadcast) started without waiting (see [`Work`]).
    pub fn broadcast_async<D: Device, T: Element>(&self, t: &Tensor<D, T>, root: usize) -> Result<Work<Tensor<D, T>>> {
        self.broadcast_work(t, root, true)
    }

    fn broadcast_work<D: Device, T: Element>(
        &self,
        t: &Tensor<D, T>,
        root: usize,
        side: bool,
    ) -> Result<Work<Tensor<D, T>>> {
        const OP: &str = "broadcast";
        self.check_rank(OP, "root", root)?;
        match self.route(OP, t)? {
            Route::Comm(c) => {
                let run = || {
                    let out = self.comm_run(c, t, CommOp::Broadcast { buf: t.buffer(), root })?;
                    Ok(t.with_buffer(out, t.checked_shape().clone()))
                };
                self.queue(side, run)
            }
            Route::Tcp => {
                let t = t.clone();
                let me = self.rank;
                self.submit(move |tcp| {
                    // Only the root's elements are sent; the others' only give the length.
                    let data = if me == root { t.to_vec()? } else { vec![T::ZERO; t.numel()] };
                    Tensor::from_vec_on(t.placement(), tcp.broadcast(data, t.shape(), root)?, t.shape())
                })
            }
        }
    }

    /// `t` of every rank, in rank order, on every rank (PyTorch's `all_gather`): one
    /// tensor per rank, each on `t`'s placement (this rank's a copy of `t`). Shapes and
    /// types must agree.
    pub fn all_gather<D: Device, T: Element>(&self, t: &Tensor<D, T>) -> Result<Vec<Tensor<D, T>>> {
        self.all_gather_work(t, false)?.wait()
    }

    /// [`all_gather`](Self::all_gather) started without waiting (see [`Work`]).
    pub fn all_gather_async<D: Device, T: Element>(&self, t: &Tensor<D, T>) -> Result<Work<Vec<Tensor<D, T>>>> {
        self.all_gather_work(t, true)
    }

    fn all_gather_work<D: Device, T: Element>(&self, t: &Tensor<D, T>, side: bool) -> Result<Work<Vec<Tensor<D, T>>>> {
        const OP: &str = "all_gather";
        match self.route(OP, t)? {
            Route::Comm(c) => {
                let run = || {
                    let out = self.comm_run(c, t, CommOp::AllGather { buf: t.buffer() })?;
                    let n = t.numel();
                    let all = t.with_buffer(out, Shape::new(OP, [n * self.world_size], T::DTYPE)?);
                    (0..self.world_size).map(|r| all.narrow(0, r * n, n)?.reshape(t.shape())).collect()
                };
                self.queue(side, run)
            }
            Route::Tcp => {
                let t = t.clone();
                self.submit(move |tcp| {
                    let parts = tcp.all_gather(t.to_vec()?, t.shape())?;
                    parts.into_iter().map(|p| Tensor::from_vec_on(t.placement(), p, t.shape())).collect()
                })
            }
        }
    }

    /// Rank `r`'s share of the reduction of `t` over all ranks (PyTorch's
    /// `reduce_scatter_tensor`): `t`'s first dim, a multiple of the world size, is cut in
    /// `world_size` equal chunks, and rank `r` gets chunk `r` reduced over the ranks,
    /// which equals that chunk of [`all_reduce`](Self::all_reduce) (bit for bit over
    /// TCP). The result has `t`'s shape with the first dim divided by the world size.
    pub fn reduce_scatter<D: Device, T: Element>(&self, t: &Tensor<D, T>, op: ReduceOp) -> Result<Tensor<D, T>> {
        self.reduce_scatter_work(t, op, false)?.wait()
    }

    /// [`reduce_scatter`](Self::reduce_scatter) started without waiting (see [`Work`]).
    pub fn reduce_scatter_async<D: Device, T: Element>(
        &self,
        t: &Tensor<D, T>,
        op: ReduceOp,
    ) -> Result<Work<Tensor<D, T>>> {
        self.reduce_scatter_work(t, op, true)
    }

    fn reduce_scatter_work<D: Device, T: Element>(
        &self,
        t: &Tensor<D, T>,
        op: ReduceOp,
        side: bool,
    ) -> Result<Work<Tensor<D, T>>> {
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
        let mut out_shape = shape.to_vec();
        out_shape[0] /= self.world_size;
        match self.route(OP, t)? {
            Route::Comm(c) => {
                let run = || {
                    let shape = Shape::new(OP, out_shape.clone(), T::DTYPE)?;
                    self.comm_reduce(c, t, op, shape, |buf, op| CommOp::ReduceScatter { buf, op })
                };
                self.queue(side, run)
            }
            Route::Tcp => {
                let t = t.clone();
                self.submit(move |tcp| {
                    let out = tcp.reduce_scatter(t.to_vec()?, t.shape(), op)?;
                    Tensor::from_vec_on(t.placement(), out, out_shape)
                })
            }
        }
    }

    /// Returns once every rank has called `barrier` (every rank sends a message to every
    /// other and waits for theirs, over TCP). It orders the processes, not device work:
    /// work already queued on a stream may still run.
    pub fn barrier(&self) -> Result<()> {
        self.submit(|tcp| tcp.barrier())?.wait()
    }

    /// Where `t`'s collective runs: the communicator for a tensor on the group's device
    /// when the ranks have one, TCP for host tensors and every other case; a tensor on a
    /// device other than the group's is an `Err`.
    fn route<D: Device, T: Element>(&self, op: &'static str, t: &Tensor<D, T>) -> Result<Route<'_>> {
        self.route_at(op, t.device())
    }

    /// [`route`](Self::route) of a tensor on `at`.
    fn route_at(&self, op: &'static str, at: DeviceId) -> Result<Route<'_>> {
        let (Some(_), Some((mine, engine))) = (at.ordinal(), &self.device) else { return Ok(Route::Tcp) };
        if at != *mine {
            return Err(dist(
                op,
                format!(
                    "the tensor is on {at} but rank {}'s group is bound to {mine}; move it with .to_dyn({mine:?}) first",
                    self.rank
                ),
            ));
        }
        Ok(match engine {
            Engine::Comm(c) => Route::Comm(c),
            Engine::Tcp => Route::Tcp,
        })
    }

    /// Runs `job` on the group's worker thread, after the jobs submitted before it.
    fn submit<R: Send + 'static>(&self, job: impl FnOnce(&Tcp) -> Result<R> + Send + 'static) -> Result<Work<R>> {
        let (tx, rx) = mpsc::sync_channel(1);
        let tcp = Arc::clone(&self.tcp);
        let job: Job = Box::new(move || {
            let _ = tx.send(job(&tcp));
        });
        let jobs = self.jobs.lock().unwrap_or_else(|p| p.into_inner());
        jobs.send(job).map_err(|_| dist("submit", "the group's worker thread has stopped (make a new group)"))?;
        Ok(Work::running(rx))
    }

    /// `f`'s collectives queued on the group's communication stream, and an event after.
    fn on_side<R>(&self, f: impl FnOnce() -> Result<R>) -> Result<Work<R>> {
        let side = match self.side.get() {
            Some(s) => s,
            None => {
                let (device, _) = self.device.as_ref().expect("a communicator implies a device");
                let s = Stream::new_on(Dyn::new(*device))?;
                self.side.get_or_init(|| s)
            }
        };
        let value = crate::stream::on_stream(side, f)?;
        Ok(Work::queued(value, side.record_event()?))
    }

    /// `run`'s collectives on the communicator: on the group's communication stream
    /// (`side`, the `_async` forms) or on the current stream, as a [`Work`].
    fn queue<R>(&self, side: bool, run: impl FnOnce() -> Result<R>) -> Result<Work<R>> {
        if side {
            self.on_side(run)
        } else {
            Ok(Work::finished(run()))
        }
    }

    /// A reduction of `t` on the communicator (`make` builds the op from the input and
    /// NCCL's reduction), with a result of `shape`. An average is NCCL's sum divided here
    /// by the world size (an integer one truncating), as over TCP and as PyTorch's DDP
    /// divides its buckets, never NCCL's own `ncclAvg`: NCCL 2.28's one-rank `ncclAvg`
    /// leaves the last element of an out-of-place result unwritten for some lengths
    /// (1 048 577 elements of f32, say; tests/dist.rs shows it on the GPU).
    fn comm_reduce<D: Device, T: Element>(
        &self,
        c: &crate::backend::AnyComm,
        t: &Tensor<D, T>,
        op: ReduceOp,
        shape: Shape,
        make: impl for<'b> FnOnce(&'b crate::backend::Buffer, CommReduce) -> CommOp<'b, crate::backend::Buffer>,
    ) -> Result<Tensor<D, T>> {
        let avg = op == ReduceOp::Avg;
        let red = if avg { CommReduce::Sum } else { op.comm() };
        let out = t.with_buffer(self.comm_run(c, t, make(t.buffer(), red))?, shape);
        if avg && self.world_size > 1 {
            return out.binary_scalar(crate::backend::BinaryOp::Div, T::from_f64(self.world_size as f64));
        }
        Ok(out)
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

impl ReduceOp {
    fn comm(self) -> CommReduce {
        match self {
            ReduceOp::Sum => CommReduce::Sum,
            ReduceOp::Avg => CommReduce::Avg,
            ReduceOp::Max => CommReduce::Max,
            ReduceOp::Min => CommReduce::Min,
        }
    }
}
