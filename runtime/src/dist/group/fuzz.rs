//! Hostile peers of a process group (issue 38): a raw socket plays the other rank of a
//! world of two against a real [`ProcessGroup`], with seeded hellos and messages that are
//! malformed, short, truncated or huge. Every case must end, within a bounded time, in an
//! `Err` naming the peer (or the result the bytes really encode); no thread of the group
//! may panic, and no length or count read from the network may be allocated.
//!
//! A failure names the case and its seed; the PRNG is splitmix64, so a case is replayed
//! by its number alone.

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, Once};
use std::thread;
use std::time::{Duration, Instant};

use super::{ProcessGroup, ReduceOp};
use crate::device::Cpu;
use crate::dist::Store;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Every wait of these tests gives up after this.
const DEADLINE: Duration = Duration::from_secs(5);

/// splitmix64: a small, seeded, reproducible source of cases.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    fn index(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// How many panics the group's threads (named `locus-dist-..`) have had in this process.
/// The hook passes every panic on to the previous one.
fn group_panics() -> usize {
    static PANICS: AtomicUsize = AtomicUsize::new(0);
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if thread::current().name().is_some_and(|n| n.starts_with("locus-dist")) {
                PANICS.fetch_add(1, Ordering::SeqCst);
            }
            previous(info);
        }));
    });
    PANICS.load(Ordering::SeqCst)
}

/// A store in memory, for one case's rendezvous.
#[derive(Default)]
struct MemStore {
    keys: Mutex<HashMap<String, Vec<u8>>>,
    changed: Condvar,
}

impl Store for MemStore {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.keys.lock().unwrap().insert(key.into(), value.into());
        self.changed.notify_all();
        Ok(())
    }

    fn get(&self, key: &str) -> Result<Vec<u8>> {
        self.wait(&[key])?;
        Ok(self.keys.lock().unwrap()[key].clone())
    }

    fn add(&self, key: &str, amount: i64) -> Result<i64> {
        let mut keys = self.keys.lock().unwrap();
        let old = keys.get(key).map_or(0, |v| std::str::from_utf8(v).unwrap().parse::<i64>().unwrap());
        keys.insert(key.into(), (old + amount).to_string().into_bytes());
        Ok(old + amount)
    }

    fn wait(&self, keys: &[&str]) -> Result<()> {
        let start = Instant::now();
        let mut map = self.keys.lock().unwrap();
        while !keys.iter().all(|k| map.contains_key(*k)) {
            if start.elapsed() > DEADLINE {
                return Err(Error::Dist { op: "store.wait", reason: format!("{keys:?} not set") });
            }
            map = self.changed.wait_timeout(map, Duration::from_millis(20)).unwrap().0;
        }
        Ok(())
    }
}

/// The collective the group runs, on `i32` elements (`Barrier`: none).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    AllReduce,
    Broadcast,
    AllGather,
    ReduceScatter,
    Barrier,
    Recv,
}

const OPS: [Op; 6] = [Op::AllReduce, Op::Broadcast, Op::AllGather, Op::ReduceScatter, Op::Barrier, Op::Recv];

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::AllReduce => "all_reduce",
            Op::Broadcast => "broadcast",
            Op::AllGather => "all_gather",
            Op::ReduceScatter => "reduce_scatter",
            Op::Barrier => "barrier",
            Op::Recv => "recv",
        }
    }

    /// The header a well-formed peer sends for `n`: kind, element type, shape, count.
    fn header(self, n: usize) -> (u8, u8, Vec<u64>, u64) {
        let n = n as u64;
        match self {
            Op::AllReduce => (1, 2, vec![n], n),
            Op::Broadcast => (2, 2, vec![n], n),
            Op::AllGather => (3, 2, vec![n], n),
            Op::ReduceScatter => (4, 2, vec![2 * n], n),
            Op::Barrier => (5, 3, vec![], 0),
            Op::Recv => (6, 2, vec![n], n),
        }
    }

    /// How many bytes the group sends the peer in this collective.
    fn sends(self, n: usize) -> usize {
        match self {
            Op::AllReduce | Op::AllGather | Op::ReduceScatter => 24 + 4 * n,
            Op::Barrier => 16,
            Op::Broadcast | Op::Recv => 0,
        }
    }
}

/// The group's own elements: `n` of them (`2n` for `reduce_scatter`).
fn mine(rank: usize, op: Op, n: usize) -> Vec<i32> {
    let len = if op == Op::ReduceScatter { 2 * n } else { n };
    (0..len).map(|i| (rank * 1000 + i) as i32 - 7).collect()
}

/// What the group gives back, by tensor.
enum Outcome {
    /// `ProcessGroup::new` failed.
    New(Error),
    /// The collective failed.
    Op(Error),
    Done(Vec<Vec<i32>>),
}

/// Joins as `rank` of two through `store` and runs `op` with the peer `1 - rank`.
fn run_group(store: Arc<MemStore>, rank: usize, timeout: Duration, op: Op, n: usize) -> Outcome {
    let pg = match ProcessGroup::new(store, rank, 2, timeout) {
        Ok(pg) => pg,
        Err(e) => return Outcome::New(e),
    };
    let peer = 1 - rank;
    let data = mine(rank, op, n);
    let len = data.len();
    let t = Tensor::<Cpu, i32>::from_vec(data, [len]).unwrap();
    let out = match op {
        Op::AllReduce => pg.all_reduce(&t, ReduceOp::Sum).and_then(|r| Ok(vec![r.to_vec()?])),
        Op::Broadcast => pg.broadcast(&t, peer).and_then(|r| Ok(vec![r.to_vec()?])),
        Op::AllGather => pg.all_gather(&t).and_then(|r| r.iter().map(|t| t.to_vec()).collect()),
        Op::ReduceScatter => pg.reduce_scatter(&t, ReduceOp::Sum).and_then(|r| Ok(vec![r.to_vec()?])),
        Op::Barrier => pg.barrier().map(|()| vec![]),
        Op::Recv => pg.recv::<Cpu, i32>(peer, [n]).and_then(|r| Ok(vec![r.to_vec()?])),
    };
    out.map_or_else(Outcome::Op, Outcome::Done)
}

/// What the group must give back when the peer's bytes are `msg`: `Some` of the
/// result when they begin with a message the group expects, `None` when they do not.
/// This is the wire format (`wire.rs`) read as plainly as possible.
fn expected(msg: &[u8], rank: usize, op: Op, n: usize) -> Option<Vec<Vec<i32>>> {
    let (kind, dtype, shape, count) = op.header(n);
    let word = |at: usize| msg.get(at..at + 8).map(|w| u64::from_le_bytes(w.try_into().unwrap()));
    let ndim = u32::from_le_bytes(msg.get(4..8)?.try_into().unwrap()) as usize;
    if ndim > 64 {
        return None;
    }
    let dims: Option<Vec<u64>> = (0..ndim).map(|d| word(8 + 8 * d)).collect();
    let end = 8 + 8 * (ndim + 1);
    if msg[0] != kind || msg[1] != dtype || dims? != shape || word(8 + 8 * ndim)? != count {
        return None;
    }
    let size = if dtype == 3 { 1 } else { 4 };
    let payload = msg.get(end..end + size * count as usize)?;
    let theirs: Vec<i32> = payload.chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect();
    let mine = mine(rank, op, n);
    let add = |a: &[i32]| a.iter().zip(&theirs).map(|(x, y)| x.wrapping_add(*y)).collect::<Vec<_>>();
    Some(match op {
        Op::AllReduce => vec![add(&mine)],
        Op::Broadcast | Op::Recv => vec![theirs],
        Op::AllGather if rank == 0 => vec![mine, theirs],
        Op::AllGather => vec![theirs, mine],
        Op::ReduceScatter => vec![add(&mine[rank * n..(rank + 1) * n])],
        Op::Barrier => vec![],
    })
}

/// A numeric field of a message: where, and how wide (1, 4 or 8 bytes).
type Field = (usize, usize);

/// Values a hostile peer writes into a field of `width` bytes.
fn hostile_value(rng: &mut Rng, width: usize, n: usize) -> u64 {
    let n = n as u64;
    let pick: &[u64] = match width {
        1 => &[0, 3, 6, 7, 0x7F, 0xFF],
        4 => &[0, 1, 2, 64, 65, 1 << 16, 0x7FFF_FFFF, 0x8000_0000, u32::MAX as u64],
        _ => &[0, 1, n - 1, n + 1, 2 * n, 1 << 28, 1 << 30, 1 << 40, i64::MAX as u64, i64::MIN as u64, u64::MAX],
    };
    if rng.index(4) == 0 {
        rng.next()
    } else {
        pick[rng.index(pick.len())]
    }
}

/// One or two of: bit flips, a truncation, a field set to a hostile value, bytes
/// overwritten, inserted or appended, the whole replaced by random bytes.
fn mutate(rng: &mut Rng, msg: &mut Vec<u8>, fields: &[Field], n: usize) {
    for _ in 0..1 + rng.index(2) {
        let len = msg.len();
        if len == 0 {
            return;
        }
        match rng.index(8) {
            0 => {
                for _ in 0..1 + rng.index(3) {
                    let bit = rng.index(8 * len);
                    msg[bit / 8] ^= 1 << (bit % 8);
                }
            }
            1 => msg.truncate(rng.index(len)),
            2..=4 => {
                let (at, width) = fields[rng.index(fields.len())];
                let v = hostile_value(rng, width, n).to_le_bytes();
                if at + width <= len {
                    msg[at..at + width].copy_from_slice(&v[..width]);
                }
            }
            5 => {
                let at = rng.index(len);
                msg[at] = rng.next() as u8;
            }
            6 => {
                let at = rng.index(len + 1);
                let k = 1 + rng.index(12);
                let junk = rng.bytes(k);
                msg.splice(at..at, junk);
            }
            _ => {
                let k = rng.index(48);
                let junk = rng.bytes(k);
                if rng.index(3) == 0 {
                    msg.clear();
                }
                msg.extend_from_slice(&junk);
            }
        }
    }
}

fn hello(rank: u32) -> Vec<u8> {
    let mut h = b"LOCUSPG\x01".to_vec();
    h.extend_from_slice(&rank.to_le_bytes());
    h.extend_from_slice(&2u32.to_le_bytes());
    h
}

/// A message as a well-formed peer sends it for `op`, and its numeric fields.
fn message(rng: &mut Rng, op: Op, n: usize) -> (Vec<u8>, Vec<Field>) {
    let (kind, dtype, shape, count) = op.header(n);
    let mut m = vec![kind, dtype, 0, 0];
    let mut fields = vec![(0, 1), (1, 1), (4, 4)];
    m.extend_from_slice(&(shape.len() as u32).to_le_bytes());
    for d in shape.iter().chain([&count]) {
        fields.push((m.len(), 8));
        m.extend_from_slice(&d.to_le_bytes());
    }
    for _ in 0..count {
        if dtype == 3 {
            m.push(rng.next() as u8);
        } else {
            m.extend_from_slice(&(rng.next() as i32).to_le_bytes());
        }
    }
    (m, fields)
}

fn hex(bytes: &[u8]) -> String {
    let shown: String = bytes.iter().take(96).map(|b| format!("{b:02x}")).collect();
    if bytes.len() > 96 {
        format!("{shown}..")
    } else {
        shown
    }
}

/// The peer's side of one case.
struct Peer {
    /// This peer's hello, as sent.
    hello: Vec<u8>,
    /// The address it publishes when it is rank 1; `None`: its own, well-formed.
    addr: Option<Vec<u8>>,
    /// Its message, as sent.
    msg: Vec<u8>,
    /// Keeps the connection open, saying nothing more, until the group is done.
    stall: bool,
}

/// Plays `peer` against a group of rank `rank` running `op`, and returns what the group
/// gave back; panics, naming the case `what`, if the group's thread panicked or took
/// more than [`DEADLINE`] past three times its own timeout.
fn play(what: &str, peer: &Peer, rank: usize, op: Op, n: usize, timeout: Duration) -> Outcome {
    let store = Arc::new(MemStore::default());
    let (tx, rx) = mpsc::channel();
    let group = {
        let store = Arc::clone(&store);
        thread::Builder::new()
            .name(format!("fuzz-rank-{rank}"))
            .spawn(move || tx.send(run_group(store, rank, timeout, op, n)))
            .unwrap()
    };
    let give_up = Instant::now() + 3 * timeout + DEADLINE;
    let mut conn: Option<TcpStream> = None;
    if rank == 1 {
        // The peer is rank 0: it connects to the group.
        let addr = String::from_utf8(store.get("addr/1").unwrap()).unwrap();
        let s = TcpStream::connect(&addr).unwrap();
        conn = Some(s);
    } else {
        // The peer is rank 1: the group connects to it, if it can read the address.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let own = listener.local_addr().unwrap().to_string().into_bytes();
        store.set("addr/1", peer.addr.as_deref().unwrap_or(&own)).unwrap();
        listener.set_nonblocking(true).unwrap();
        while Instant::now() < give_up {
            match listener.accept() {
                Ok((s, _)) => {
                    conn = Some(s);
                    break;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    // A garbled address: the group gives up without connecting.
                    if let Ok(out) = rx.try_recv() {
                        group.join().unwrap().ok();
                        return out;
                    }
                    thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("{what}: accept: {e}"),
            }
        }
    }
    if let Some(s) = &mut conn {
        s.set_nonblocking(false).unwrap();
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        s.set_write_timeout(Some(DEADLINE)).unwrap();
        // The hello and the message at once (the group reads them as one stream), then
        // what the group sent, its hello and its message, so that closing does not reset
        // the connection under it. Errors are the group's to report.
        let _ = s.write_all(&[&peer.hello[..], &peer.msg].concat());
        let _ = s.read_exact(&mut vec![0; 16 + op.sends(n)]);
    }
    if !peer.stall {
        drop(conn.take());
    }
    let left = give_up.saturating_duration_since(Instant::now());
    let out = match rx.recv_timeout(left) {
        Ok(out) => out,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what}: the group did not return within {:?}", 3 * timeout + DEADLINE)
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: the group's thread panicked"),
    };
    drop(conn);
    group.join().unwrap().ok();
    out
}

/// 1000 seeded cases (about 2 s in a debug build): a raw peer, as rank 0 or 1 of two,
/// meets a real group with a hello (one case in eight mutated: bit flips, a truncation,
/// the rank or world size set to hostile values such as `u32::MAX`, random bytes), or as
/// rank 1 publishes a garbled address (one case in 32), then sends its message for one
/// of the six collectives on `i32` (`u8` for `barrier`), mutated (the same ways, and the
/// kind, type, dims count, dims and element count set to hostile values: 65 or
/// `u32::MAX` dims, `u64::MAX`, negative or `1 << 40` elements), and closes, or stalls
/// (one case in 64, against a group timeout of 200 ms). The group must return the
/// result those bytes encode, or an `Err` of the right call naming the peer, within its
/// timeout (plus 5 s), and no thread of it may panic.
#[test]
fn hostile_peers_get_errors_naming_them() {
    const CASES: u64 = 1000;
    const SEED: u64 = 0x5EED_0038_0004_0003;
    let panics = group_panics();
    let start = Instant::now();
    let mut tally = [0usize; 3]; // results, refused hellos or addresses, failed collectives
    for case in 0..CASES {
        let seed = SEED ^ case.wrapping_mul(0x9E37_79B9);
        let mut rng = Rng(seed);
        let rank = rng.index(2);
        let peer_rank = 1 - rank;
        let op = OPS[rng.index(OPS.len())];
        let n = 1 + rng.index(5);
        let stall = rng.index(64) == 0;
        let timeout = if stall { Duration::from_millis(200) } else { DEADLINE };
        let mut peer = Peer { hello: hello(peer_rank as u32), addr: None, msg: Vec::new(), stall };
        if rank == 0 && rng.index(32) == 0 {
            let k = rng.index(40);
            peer.addr = Some([b"x:".to_vec(), rng.bytes(k)].concat());
        }
        let bad_hello = rng.index(8) == 0;
        if bad_hello {
            let fields = [(0, 1), (7, 1), (8, 4), (12, 4)];
            mutate(&mut rng, &mut peer.hello, &fields, 2);
        }
        let (mut msg, fields) = message(&mut rng, op, n);
        if !bad_hello || rng.index(2) == 0 {
            mutate(&mut rng, &mut msg, &fields, n);
        }
        peer.msg = msg;
        // The group reads the hello and the message as one stream.
        let stream = [&peer.hello[..], &peer.msg].concat();
        let hello_ok = peer.addr.is_none() && stream.get(..16) == Some(&hello(peer_rank as u32)[..]);
        let want = if hello_ok { expected(&stream[16..], rank, op, n) } else { None };
        let what = format!(
            "case {case} (seed {seed:#x}): group rank {rank}, {} of {n}, stall {stall}, hello {}, message {}",
            op.name(),
            hex(&peer.hello),
            hex(&peer.msg)
        );

        let out = play(&what, &peer, rank, op, n, timeout);
        let named = |e: &Error| match e {
            Error::Dist { reason, .. } => reason.len() < 2048 && reason.contains(&format!("rank {peer_rank}")),
            _ => false,
        };
        match (out, hello_ok, want) {
            (Outcome::Done(got), _, Some(want)) => {
                assert_eq!(got, want, "{what}");
                tally[0] += 1;
            }
            (Outcome::Done(got), _, None) => panic!("{what}: the group returned {got:?} from bytes that encode none"),
            (Outcome::New(e @ Error::Dist { op: "process_group", .. }), false, _) => {
                // The hello or the address was refused; a hello's error names its rank
                // when it says one, the address's quotes the store key.
                let text = e.to_string();
                assert!(text.len() < 2048 && (text.contains("rank") || text.contains("addr/1")), "{what}: {text}");
                tally[1] += 1;
            }
            (Outcome::Op(e @ Error::Dist { op: o, .. }), true, None) if o == op.name() && named(&e) => tally[2] += 1,
            (Outcome::Op(e @ Error::Dist { .. }), true, Some(_)) if stall && e.to_string().contains("within") => {
                tally[2] += 1;
            }
            (Outcome::New(e), ..) | (Outcome::Op(e), ..) => panic!("{what}: {e:?}"),
        }
        assert_eq!(group_panics(), panics, "a thread of the group panicked in {what}");
    }
    let [done, refused, failed] = tally;
    eprintln!(
        "{CASES} hostile peers in {:?}: {done} results, {refused} refused at the rendezvous, {failed} failed calls",
        start.elapsed()
    );
}

/// 12 targeted headers, each followed by the 4 elements of a well-formed message, from
/// a peer that then stalls (the group's timeout is 5 s): dims
/// counts over `MAX_DIMS` (65, `u32::MAX`), element counts whose payload is over
/// `MAX_DRAIN` (so not read past) or overflows (`1 << 40`, `i64::MIN`, `u64::MAX`), dims of `u64::MAX`,
/// unknown kinds and types. The group must refuse each at once (under 2 s), with an
/// `Err` naming the peer and what is wrong, instead of allocating the dims or waiting for
/// a payload that will never come.
#[test]
fn garbled_headers_are_refused_at_once() {
    let panics = group_panics();
    let n = 4;
    let cases: Vec<(&str, usize, u64, &str)> = vec![
        ("65 dims", 4, 65, "garbled header (65 dims)"),
        ("u32::MAX dims", 4, u32::MAX as u64, "garbled header (4294967295 dims)"),
        ("2^40 elements", 16, 1 << 40, "sent 1099511627776 elements but rank 1 expects 4"),
        ("i64::MIN elements", 16, i64::MIN as u64, "sent 9223372036854775808 elements"),
        ("u64::MAX elements", 16, u64::MAX, "sent 18446744073709551615 elements"),
        ("a dim of u64::MAX", 8, u64::MAX, "rank 0 has shape [18446744073709551615] but rank 1 has shape [4]"),
        ("kind 0", 0, 0, "sent a `unknown message 0` message while rank 1 is in `all_reduce`"),
        ("kind 255", 0, 255, "unknown message 255"),
        ("kind barrier", 0, 5, "sent a `barrier` message"),
        ("type 7", 1, 7, "rank 0 has unknown type 7 elements but rank 1 has i32"),
        ("type 255", 1, 255, "unknown type 255"),
        ("type f32", 1, 0, "rank 0 has f32 elements but rank 1 has i32"),
    ];
    for (what, at, value, says) in cases {
        let (mut msg, _) = message(&mut Rng(1), Op::AllReduce, n);
        let width = match at {
            0 | 1 => 1,
            4 => 4,
            _ => 8,
        };
        msg[at..at + width].copy_from_slice(&value.to_le_bytes()[..width]);
        let peer = Peer { hello: hello(0), addr: None, msg, stall: true };
        let t = Instant::now();
        let out = play(what, &peer, 1, Op::AllReduce, n, DEADLINE);
        let took = t.elapsed();
        match out {
            Outcome::Op(Error::Dist { op: "all_reduce", reason }) => {
                assert!(reason.contains(says) && reason.contains("rank 0"), "{what}: {reason}");
            }
            Outcome::Op(e) | Outcome::New(e) => panic!("{what}: {e:?}"),
            Outcome::Done(v) => panic!("{what}: returned {v:?}"),
        }
        assert!(took < Duration::from_secs(2), "{what}: refused after {took:?}");
    }
    assert_eq!(group_panics(), panics, "a thread of the group panicked");
}

/// A store that holds 1 MiB of garbage as rank 1's address: rank 0's `Err` says so in
/// under 1 KiB (it quotes 64 bytes of it), rather than the whole value.
#[test]
fn a_garbage_address_is_an_error_of_bounded_size() {
    let mut garbage = vec![b'x'; 1 << 20];
    garbage[100] = 0xFF;
    let peer = Peer { hello: hello(1), addr: Some(garbage), msg: vec![], stall: false };
    match play("garbage address", &peer, 0, Op::Barrier, 1, DEADLINE) {
        Outcome::New(Error::Dist { op: "process_group", reason }) => {
            assert!(reason.contains("addr/1") && reason.contains("1048576 bytes"), "{reason}");
            assert!(reason.len() < 1024, "an error of {} bytes", reason.len());
        }
        Outcome::New(e) | Outcome::Op(e) => panic!("{e:?}"),
        Outcome::Done(v) => panic!("returned {v:?}"),
    }
}
