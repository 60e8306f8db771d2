//! [`ProcessGroup`]: collectives between processes over TCP, on host memory (the host
//! backend's way; PyTorch's Gloo group plays this part).

use std::collections::BTreeMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use super::Store;
use crate::device::{Device, StaticDevice};
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

/// The first bytes of every hello.
const MAGIC: &[u8; 8] = b"LOCUSPG\x01";
/// The most dims a message's shape may have.
const MAX_DIMS: usize = 64;
/// The op name of errors from [`ProcessGroup::new`].
const NEW: &str = "process_group";

/// The kind of a message: the collective that sent it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    AllReduce = 1,
    Broadcast = 2,
    AllGather = 3,
    ReduceScatter = 4,
    Barrier = 5,
    Send = 6,
}

impl Kind {
    fn from_u8(b: u8) -> Option<Self> {
        Some(match b {
            1 => Kind::AllReduce,
            2 => Kind::Broadcast,
            3 => Kind::AllGather,
            4 => Kind::ReduceScatter,
            5 => Kind::Barrier,
            6 => Kind::Send,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Kind::AllReduce => "all_reduce",
            Kind::Broadcast => "broadcast",
            Kind::AllGather => "all_gather",
            Kind::ReduceScatter => "reduce_scatter",
            Kind::Barrier => "barrier",
            Kind::Send => "send",
        }
    }
}

fn dtype_code(d: DType) -> u8 {
    match d {
        DType::F32 => 0,
        DType::F64 => 1,
        DType::I32 => 2,
        DType::U8 => 3,
    }
}

fn dtype_name(code: u8) -> String {
    match code {
        0 => "f32".into(),
        1 => "f64".into(),
        2 => "i32".into(),
        3 => "u8".into(),
        c => format!("unknown type {c}"),
    }
}

/// What a message says about itself: the collective, element type and shape of the
/// sender's tensor, and how many elements follow.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Header {
    kind: u8,
    dtype: u8,
    shape: Vec<usize>,
    count: usize,
}

impl Header {
    fn new(kind: Kind, dtype: DType, shape: &[usize], count: usize) -> Self {
        Self { kind: kind as u8, dtype: dtype_code(dtype), shape: shape.to_vec(), count }
    }

    /// `[kind u8][dtype u8][0 u8; 2][ndim u32][dims u64 ...][count u64]`, little-endian.
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + 8 * self.shape.len());
        out.extend_from_slice(&[self.kind, self.dtype, 0, 0]);
        out.extend_from_slice(&(self.shape.len() as u32).to_le_bytes());
        for &d in &self.shape {
            out.extend_from_slice(&(d as u64).to_le_bytes());
        }
        out.extend_from_slice(&(self.count as u64).to_le_bytes());
        out
    }

    fn read(r: &mut impl Read) -> io::Result<Self> {
        let mut head = [0u8; 8];
        r.read_exact(&mut head)?;
        let ndim = u32::from_le_bytes([head[4], head[5], head[6], head[7]]) as usize;
        if ndim > MAX_DIMS {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("a garbled header ({ndim} dims)")));
        }
        let mut rest = vec![0u8; 8 * (ndim + 1)];
        r.read_exact(&mut rest)?;
        let mut words = rest.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")) as usize);
        let shape: Vec<usize> = words.by_ref().take(ndim).collect();
        let count = words.next().expect("the count");
        Ok(Self { kind: head[0], dtype: head[1], shape, count })
    }
}

/// Reads and drops the payload that `h` announces, if it is of a sane size.
fn drain(r: &mut TcpStream, h: &Header) {
    let size = match h.dtype {
        0 | 2 => 4,
        1 => 8,
        3 => 1,
        _ => return,
    };
    if let Some(n) = h.count.checked_mul(size).filter(|&n| n <= 1 << 30) {
        let _ = io::copy(&mut r.take(n as u64), &mut io::sink());
    }
}

fn write_msg(w: &mut TcpStream, header: &[u8], payload: &[u8]) -> io::Result<()> {
    w.write_all(header)?;
    w.write_all(payload)?;
    w.flush()
}

/// The hello: magic, rank, world size.
fn hello(rank: usize, world_size: usize) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[..8].copy_from_slice(MAGIC);
    h[8..12].copy_from_slice(&(rank as u32).to_le_bytes());
    h[12..].copy_from_slice(&(world_size as u32).to_le_bytes());
    h
}

/// Reads a hello: the peer's rank and world size.
fn read_hello(r: &mut TcpStream) -> io::Result<(usize, usize)> {
    let mut h = [0u8; 16];
    r.read_exact(&mut h)?;
    if &h[..8] != MAGIC {
        return Err(io::Error::new(io::ErrorKind::InvalidData, "not a locus process group (wrong hello)"));
    }
    let rank = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as usize;
    let world = u32::from_le_bytes([h[12], h[13], h[14], h[15]]) as usize;
    Ok((rank, world))
}

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

/// Sets the group's options on a new connection and splits it into two handles.
fn link(s: TcpStream, timeout: Duration) -> io::Result<Link> {
    s.set_nonblocking(false)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    Ok(Link { write: s.try_clone()?, read: s })
}

/// The element-wise combination of `a` and `b`.
fn combine<T: Element>(op: ReduceOp, a: T, b: T) -> T {
    let is_nan = |x: T| x.partial_cmp(&x).is_none();
    match op {
        ReduceOp::Sum | ReduceOp::Avg => a.add(b),
        ReduceOp::Max => a.max_of(b),
        ReduceOp::Min => {
            if is_nan(a) || a <= b {
                a
            } else {
                b
            }
        }
    }
}

/// `parts` (one per rank, in rank order) reduced element-wise in rank order.
fn reduce<T: Element>(op: ReduceOp, parts: &[&[T]], world_size: usize) -> Vec<T> {
    let mut acc = parts[0].to_vec();
    for part in &parts[1..] {
        for (a, &b) in acc.iter_mut().zip(part.iter()) {
            *a = combine(op, *a, b);
        }
    }
    if op == ReduceOp::Avg {
        let n = T::from_f64(world_size as f64);
        for a in &mut acc {
            *a = a.div(n).unwrap_or(T::ZERO);
        }
    }
    acc
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
            let peer_addr: SocketAddr = std::str::from_utf8(&value)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| dist(NEW, format!("store key `{key}` holds {value:?}, not an address")))?;
            let stream = loop {
                let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
                match TcpStream::connect_timeout(&peer_addr, left) {
                    Ok(s) => break s,
                    Err(e) if Instant::now() < deadline && e.kind() == io::ErrorKind::ConnectionRefused => {
                        thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => {
                        return Err(dist(
                            NEW,
                            format!("rank {rank}: cannot connect to rank {peer} at {peer_addr}: {e}"),
                        ))
                    }
                }
            };
            let mut l = link(stream, timeout).map_err(|e| dist(NEW, format!("rank {rank}: {e}")))?;
            let said = l.write.write_all(&hello(rank, world_size)).and_then(|()| read_hello(&mut l.read));
            let (who, peer_world) = said.map_err(|e| {
                dist(NEW, format!("rank {rank}: hello to {peer_addr}: {}", describe(peer, &e, timeout)))
            })?;
            if peer_world != world_size {
                return Err(dist(
                    NEW,
                    format!("rank {who} has world size {peer_world} but rank {rank} has {world_size}"),
                ));
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

    /// The connections, or the error that broke the group.
    fn state(&self) -> Result<std::sync::MutexGuard<'_, State>> {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        match &state.broken {
            Some(e) => Err(e.clone()),
            None => Ok(state),
        }
    }

    /// Runs one exchange on `state`, marking the group broken when it fails.
    fn run<R>(&self, f: impl FnOnce(&mut State) -> Result<R>) -> Result<R> {
        let mut state = self.state()?;
        let out = f(&mut state);
        if let Err(e) = &out {
            state.broken = Some(match e {
                Error::Dist { op, reason } => {
                    Error::Dist { op, reason: format!("{reason} (the group broke in this call; make a new one)") }
                }
                other => other.clone(),
            });
        }
        out
    }

    /// Reads one message from `peer` and checks its header against `want` (the shape
    /// too when `check_shape`), then reads its `want.count` elements.
    fn read_checked<T: Element>(
        &self,
        op: &'static str,
        peer: usize,
        r: &mut TcpStream,
        want: &Header,
        check_shape: bool,
    ) -> std::result::Result<Vec<T>, String> {
        let me = self.rank;
        let got = Header::read(r).map_err(|e| describe(peer, &e, self.timeout))?;
        let ok = got.kind == want.kind
            && got.dtype == want.dtype
            && got.count == want.count
            && (!check_shape || got.shape == want.shape);
        if !ok {
            // Read past the payload, so that no data is left unread when this process
            // closes the socket (which would reset the connection and lose what the peer
            // has yet to read from this side, e.g. its own view of this mismatch).
            drain(r, &got);
        }
        if got.kind != want.kind {
            let theirs =
                Kind::from_u8(got.kind).map_or_else(|| format!("unknown message {}", got.kind), |k| k.name().into());
            return Err(format!(
                "rank {peer} sent a `{theirs}` message while rank {me} is in `{op}`: \
                 every rank must call the same collectives in the same order"
            ));
        }
        if got.dtype != want.dtype {
            return Err(format!(
                "rank {peer} has {} elements but rank {me} has {}",
                dtype_name(got.dtype),
                dtype_name(want.dtype)
            ));
        }
        if check_shape && got.shape != want.shape {
            return Err(format!("rank {peer} has shape {:?} but rank {me} has shape {:?}", got.shape, want.shape));
        }
        if got.count != want.count {
            return Err(format!("rank {peer} sent {} elements but rank {me} expects {}", got.count, want.count));
        }
        let mut data = vec![T::ZERO; want.count];
        r.read_exact(bytemuck::cast_slice_mut(&mut data)).map_err(|e| describe(peer, &e, self.timeout))?;
        Ok(data)
    }

    /// Sends `payload(p)` to every peer `p` (each from its own thread, so that no two
    /// ranks block writing to each other) and reads one message from every peer in rank
    /// order, checked against `want`. Reads every peer even after a failure, so that the
    /// error names every peer that failed and no data is left unread. Returns the
    /// peers' elements by rank (this rank's entry empty).
    fn exchange<'a, T: Element>(
        &self,
        state: &mut State,
        op: &'static str,
        want: &Header,
        payload: impl Fn(usize) -> &'a [T],
    ) -> Result<Vec<Vec<T>>> {
        let header = want.encode();
        let timeout = self.timeout;
        let mut failures: BTreeMap<usize, String> = BTreeMap::new();
        let mut received: Vec<Vec<T>> = (0..self.world_size).map(|_| Vec::new()).collect();
        thread::scope(|s| -> Result<()> {
            let mut writers = Vec::new();
            let mut readers = Vec::new();
            for (peer, l) in state.links.iter_mut().enumerate() {
                let Some(Link { read, write }) = l else { continue };
                let bytes: &[u8] = bytemuck::cast_slice(payload(peer));
                let header = &header;
                let w = thread::Builder::new()
                    .name(format!("locus-dist-send-{peer}"))
                    .spawn_scoped(s, move || write_msg(write, header, bytes))
                    .map_err(|e| Error::Thread { message: e.to_string() })?;
                writers.push((peer, w));
                readers.push((peer, read));
            }
            for (peer, r) in readers {
                match self.read_checked::<T>(op, peer, r, want, true) {
                    Ok(data) => received[peer] = data,
                    Err(reason) => {
                        failures.insert(peer, reason);
                    }
                }
            }
            for (peer, w) in writers {
                let res = w.join().unwrap_or_else(|_| Err(io::Error::other("the sending thread panicked")));
                if let Err(e) = res {
                    failures.entry(peer).or_insert_with(|| describe(peer, &e, timeout));
                }
            }
            Ok(())
        })?;
        if failures.is_empty() {
            Ok(received)
        } else {
            Err(dist(op, failures.into_values().collect::<Vec<_>>().join("; ")))
        }
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

    /// Sends `t` to rank `dst`, which takes it with [`recv`](Self::recv) of the same
    /// shape. Returns when the data is handed to the operating system (small tensors do
    /// not wait for `dst`; large ones wait for it to read, up to the timeout).
    pub fn send<D: Device, T: Element>(&self, t: &Tensor<D, T>, dst: usize) -> Result<()> {
        const OP: &str = "send";
        self.check_peer(OP, "dst", dst)?;
        let data = t.to_vec()?;
        let header = Header::new(Kind::Send, T::DTYPE, t.shape(), data.len()).encode();
        self.run(|s| {
            let l = s.links[dst].as_mut().expect("a link to every other rank");
            write_msg(&mut l.write, &header, bytemuck::cast_slice(&data))
                .map_err(|e| dist(OP, describe(dst, &e, self.timeout)))
        })
    }

    /// The tensor of `shape` that rank `src` sends with [`send`](Self::send), on the
    /// static placement `D` (see [`recv_on`](Self::recv_on) for `Dyn`).
    pub fn recv<D: StaticDevice, T: Element>(&self, src: usize, shape: impl AsRef<[usize]>) -> Result<Tensor<D, T>> {
        self.recv_on(D::default(), src, shape)
    }

    /// [`recv`](Self::recv) onto `device`. A sent tensor of another shape or type is an
    /// `Err` naming both ranks.
    pub fn recv_on<D: Device, T: Element>(
        &self,
        device: D,
        src: usize,
        shape: impl AsRef<[usize]>,
    ) -> Result<Tensor<D, T>> {
        const OP: &str = "recv";
        self.check_peer(OP, "src", src)?;
        let shape = shape.as_ref();
        let count = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).ok_or_else(|| Error::InvalidArgument {
            op: OP,
            reason: format!("shape {shape:?} has too many elements"),
        })?;
        let want = Header::new(Kind::Send, T::DTYPE, shape, count);
        let data = self.run(|s| {
            let l = s.links[src].as_mut().expect("a link to every other rank");
            self.read_checked(OP, src, &mut l.read, &want, true).map_err(|r| dist(OP, r))
        })?;
        Tensor::from_vec_on(device, data, shape)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::{Cpu, Cuda, Dyn};
    use crate::dist::FileStore;

    fn fresh_store(name: &str, timeout: Duration) -> (Arc<dyn Store>, std::path::PathBuf) {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!("locus-group-{name}-{}-{nanos}", std::process::id()));
        (Arc::new(FileStore::new(&dir, timeout).unwrap()), dir)
    }

    /// Runs `f(group)` on `world` threads, one rank each; the results by rank.
    fn on_ranks<R: Send + 'static>(
        name: &str,
        world: usize,
        timeout: Duration,
        f: impl Fn(ProcessGroup) -> R + Send + Sync + 'static,
    ) -> Vec<R> {
        let (store, dir) = fresh_store(name, Duration::from_secs(20));
        let f = Arc::new(f);
        let handles: Vec<_> = (0..world)
            .map(|rank| {
                let (store, f) = (Arc::clone(&store), Arc::clone(&f));
                thread::spawn(move || f(ProcessGroup::new(store, rank, world, timeout).unwrap()))
            })
            .collect();
        let out = handles.into_iter().map(|h| h.join().unwrap()).collect();
        std::fs::remove_dir_all(dir).ok();
        out
    }

    #[test]
    fn collectives_on_three_threads() {
        let results = on_ranks("three", 3, Duration::from_secs(20), |pg| {
            let r = pg.rank() as f32;
            let t = Tensor::<Cpu>::from_vec(vec![r, 10.0 * r, -r, 0.5], [2, 2]).unwrap();
            let sum = pg.all_reduce(&t, ReduceOp::Sum).unwrap().to_vec().unwrap();
            let max = pg.all_reduce(&t, ReduceOp::Max).unwrap().to_vec().unwrap();
            let min = pg.all_reduce(&t, ReduceOp::Min).unwrap().to_vec().unwrap();
            let avg = pg.all_reduce(&t, ReduceOp::Avg).unwrap().to_vec().unwrap();
            let b = pg.broadcast(&Tensor::<Cuda<0>, i32>::full([3], pg.rank() as i32 + 7).unwrap(), 2).unwrap();
            let g = pg.all_gather(&Tensor::<Cpu, u8>::full([1], pg.rank() as u8).unwrap()).unwrap();
            let rs = pg
                .reduce_scatter(&Tensor::<Cpu, i32>::arange(0, 6, 1).unwrap().reshape([3, 2]).unwrap(), ReduceOp::Sum)
                .unwrap();
            pg.barrier().unwrap();
            (sum, max, min, avg, b.to_vec().unwrap(), g.iter().map(|x| x.to_vec().unwrap()[0]).collect::<Vec<_>>(), {
                assert_eq!(rs.shape(), &[1, 2]);
                rs.to_vec().unwrap()
            })
        });
        for (rank, (sum, max, min, avg, b, g, rs)) in results.into_iter().enumerate() {
            assert_eq!(sum, vec![3.0, 30.0, -3.0, 1.5]);
            assert_eq!(max, vec![2.0, 20.0, 0.0, 0.5]);
            assert_eq!(min, vec![0.0, 0.0, -2.0, 0.5]);
            assert_eq!(avg, vec![1.0, 10.0, -1.0, 0.5]);
            assert_eq!(b, vec![9; 3]);
            assert_eq!(g, vec![0, 1, 2]);
            assert_eq!(rs, vec![6 * rank as i32, 6 * rank as i32 + 3]);
        }
    }

    #[test]
    fn send_and_recv_between_two_threads_on_dyn() {
        let out = on_ranks("p2p", 2, Duration::from_secs(20), |pg| {
            let dev = Dyn::new(crate::device::DeviceId::Cpu);
            if pg.rank() == 0 {
                pg.send(&Tensor::<Dyn, f64>::from_vec_on(dev, vec![1.5, 2.5], [2]).unwrap(), 1).unwrap();
                let e = pg.recv_on::<Dyn, f64>(dev, 0, [2]).unwrap_err().to_string();
                assert!(e.contains("this rank itself"), "{e}");
                None
            } else {
                let wrong = pg.recv::<Cpu, f64>(0, [3]);
                let e = wrong.unwrap_err().to_string();
                assert!(e.contains("rank 0 has shape [2] but rank 1 has shape [3]"), "{e}");
                // The group broke: every later call says so.
                let e = pg.barrier().unwrap_err().to_string();
                assert!(e.contains("broke"), "{e}");
                Some(())
            }
        });
        assert_eq!(out, vec![None, Some(())]);
    }

    #[test]
    fn mismatched_shapes_types_and_orders_name_the_ranks() {
        let errs = on_ranks("mismatch", 2, Duration::from_secs(20), |pg| {
            let n = pg.rank() + 2;
            pg.all_reduce(&Tensor::<Cpu>::zeros([n]).unwrap(), ReduceOp::Sum).unwrap_err().to_string()
        });
        assert!(errs[0].contains("rank 1 has shape [3] but rank 0 has shape [2]"), "{}", errs[0]);
        assert!(errs[1].contains("rank 0 has shape [2] but rank 1 has shape [3]"), "{}", errs[1]);

        let errs = on_ranks("order", 2, Duration::from_secs(20), |pg| {
            if pg.rank() == 0 {
                pg.barrier().unwrap_err().to_string()
            } else {
                pg.all_reduce(&Tensor::<Cpu, u8>::zeros([1]).unwrap(), ReduceOp::Max).unwrap_err().to_string()
            }
        });
        assert!(errs[0].contains("rank 1 sent a `all_reduce` message while rank 0 is in `barrier`"), "{}", errs[0]);
        assert!(errs[1].contains("rank 0 sent a `barrier` message"), "{}", errs[1]);

        let errs = on_ranks("dtype", 2, Duration::from_secs(20), |pg| {
            if pg.rank() == 0 {
                pg.all_gather(&Tensor::<Cpu, i32>::zeros([1]).unwrap()).unwrap_err().to_string()
            } else {
                pg.all_gather(&Tensor::<Cpu, f32>::zeros([1]).unwrap()).unwrap_err().to_string()
            }
        });
        assert!(errs[0].contains("rank 1 has f32 elements but rank 0 has i32"), "{}", errs[0]);
    }

    #[test]
    fn a_world_size_mismatch_names_both_ranks_and_sizes() {
        let (store, dir) = fresh_store("world", Duration::from_secs(2));
        let s1 = Arc::clone(&store);
        let other = thread::spawn(move || ProcessGroup::new(s1, 1, 2, Duration::from_secs(5)).unwrap_err().to_string());
        let e0 = ProcessGroup::new(store, 0, 3, Duration::from_secs(5)).unwrap_err().to_string();
        let e1 = other.join().unwrap();
        assert!(e0.contains("rank 1 has world size 2 but rank 0 has 3"), "{e0}");
        assert!(e1.contains("rank 0 has world size 3 but rank 1 has 2"), "{e1}");
        std::fs::remove_dir_all(dir).ok();
    }

    #[test]
    fn a_peer_that_stops_answering_is_an_error_after_the_timeout() {
        let timeout = Duration::from_millis(200);
        let out = on_ranks("stuck", 2, timeout, move |pg| {
            if pg.rank() == 1 {
                // Alive but never calls the collective; keeps the group until rank 0 is done.
                thread::sleep(Duration::from_secs(2));
                return None;
            }
            let t = Instant::now();
            let e = pg.all_reduce(&Tensor::<Cpu>::ones([4]).unwrap(), ReduceOp::Sum).unwrap_err();
            Some((t.elapsed(), e.to_string()))
        });
        let (elapsed, e) = out[0].clone().unwrap();
        assert!(elapsed >= timeout && elapsed < Duration::from_millis(1500), "{elapsed:?}");
        assert!(e.contains("rank 1 did not answer within"), "{e}");
    }

    #[test]
    fn a_dropped_peer_is_an_error_at_once() {
        let out = on_ranks("dropped", 3, Duration::from_secs(10), |pg| {
            pg.barrier().unwrap();
            if pg.rank() == 2 {
                drop(pg);
                return None;
            }
            let t = Instant::now();
            let e = pg.all_reduce(&Tensor::<Cpu>::ones([4]).unwrap(), ReduceOp::Sum).unwrap_err();
            Some((t.elapsed(), e.to_string()))
        });
        for (elapsed, e) in out.into_iter().flatten() {
            assert!(elapsed < Duration::from_secs(5), "{elapsed:?}");
            assert!(e.contains("rank 2 closed the connection"), "{e}");
            assert!(!e.contains("rank 0 ") && !e.contains("rank 1 "), "only rank 2 failed: {e}");
        }
    }

    #[test]
    fn arguments_are_checked_before_talking() {
        let out = on_ranks("args", 1, Duration::from_secs(5), |pg| {
            let t = Tensor::<Cpu, u8>::from_vec(vec![1, 2], [2]).unwrap();
            assert_eq!(pg.all_reduce(&t, ReduceOp::Avg).unwrap().to_vec().unwrap(), vec![1, 2]);
            assert!(pg.broadcast(&t, 1).is_err());
            assert!(pg.send(&t, 0).is_err());
            assert_eq!(pg.reduce_scatter(&t, ReduceOp::Sum).unwrap().to_vec().unwrap(), vec![1, 2]);
            assert!(pg.reduce_scatter(&Tensor::<Cpu>::ones(Vec::<usize>::new()).unwrap(), ReduceOp::Sum).is_err());
            assert_eq!(pg.all_gather(&t).unwrap().len(), 1);
            pg.barrier().unwrap();
        });
        assert_eq!(out.len(), 1);
        let (store, dir) = fresh_store("bad", Duration::from_secs(1));
        assert!(ProcessGroup::new(Arc::clone(&store), 2, 2, Duration::from_secs(1)).is_err());
        assert!(ProcessGroup::new(store, 0, 1, Duration::ZERO).is_err());
        std::fs::remove_dir_all(dir).ok();
    }
}
