//! Hostile peers of the TCP store (issue 38): seeded cases of malformed, short, truncated
//! and huge messages, sent by a raw socket to a real host (and by a raw host to a real
//! client). Every case must end, within a bounded time, in a closed connection or an
//! `Err` (or the answer the bytes really encode); no thread of the host may panic, the
//! host must keep answering well-formed requests, and no length read from the network
//! may be allocated before its bytes arrive.
//!
//! A failure names the case and its seed; the PRNG is splitmix64, so a case is replayed
//! by its number alone.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;
use std::thread;
use std::time::{Duration, Instant};

use super::protocol::{
    ADD, APPEND, CANCEL_WAIT, CHECK, COMPARE_SET, DELETE_KEY, GET, GETNUMKEYS, MAGIC, MAX_KEY, MAX_KEYS, MAX_VALUE,
    MULTI_GET, MULTI_SET, PING, SET, VALIDATE, WAIT,
};
use super::server::MAX_CONNS;
use super::TcpStore;
use crate::dist::Store;
use crate::error::Error;

/// Every wait of these tests gives up after this.
const DEADLINE: Duration = Duration::from_secs(5);

/// splitmix64: a small, seeded, reproducible source of cases.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn index(&mut self, n: usize) -> usize {
        self.below(n as u64) as usize
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

/// Lengths and counts a hostile peer writes into a length field.
const HOSTILE_LENGTHS: [u64; 15] = [
    0,
    1,
    7,
    MAX_KEY,
    MAX_KEY + 1,
    MAX_VALUE,
    MAX_VALUE + 1,
    MAX_KEYS,
    MAX_KEYS + 1,
    u32::MAX as u64,
    1 << 40,
    i64::MAX as u64,
    i64::MIN as u64, // negative, to a signed reader
    (-1i64) as u64,
    u64::MAX,
];

/// How many panics the threads of the host (named `locus-store-conn`) have had in this
/// process. The hook passes every panic on to the previous one.
fn host_panics() -> usize {
    static PANICS: AtomicUsize = AtomicUsize::new(0);
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if thread::current().name().is_some_and(|n| n.starts_with("locus-store")) {
                PANICS.fetch_add(1, Ordering::SeqCst);
            }
            previous(info);
        }));
    });
    PANICS.load(Ordering::SeqCst)
}

/// A request as bytes, with where its command bytes and its length fields are.
#[derive(Default)]
struct Msg {
    bytes: Vec<u8>,
    commands: Vec<usize>,
    lengths: Vec<usize>,
}

impl Msg {
    fn cmd(&mut self, c: u8) {
        self.commands.push(self.bytes.len());
        self.bytes.push(c);
    }

    fn length(&mut self, n: u64) {
        self.lengths.push(self.bytes.len());
        self.bytes.extend_from_slice(&n.to_le_bytes());
    }

    fn string(&mut self, s: &[u8]) {
        self.length(s.len() as u64);
        self.bytes.extend_from_slice(s);
    }
}

fn key(rng: &mut Rng) -> Vec<u8> {
    // "/num" holds a number, "/text" does not, the others come and go.
    [&b"/num"[..], b"/text", b"/f0", b"/f1", b"/gone", b""][rng.index(6)].to_vec()
}

fn value(rng: &mut Rng) -> Vec<u8> {
    let n = rng.index(24);
    rng.bytes(n)
}

/// The handshake and one to three well-formed requests of every kind.
fn requests(rng: &mut Rng) -> Msg {
    let mut m = Msg::default();
    m.cmd(VALIDATE);
    m.bytes.extend_from_slice(&MAGIC.to_le_bytes());
    for _ in 0..1 + rng.below(3) {
        match rng.below(13) {
            0 => {
                m.cmd(SET);
                m.string(&key(rng));
                m.string(&value(rng));
            }
            1 => {
                m.cmd(APPEND);
                m.string(&key(rng));
                m.string(&value(rng));
            }
            2 => {
                m.cmd(COMPARE_SET);
                m.string(&key(rng));
                m.string(&value(rng));
                m.string(&value(rng));
            }
            3 => {
                m.cmd(GET);
                m.string(&key(rng));
            }
            4 => {
                m.cmd(ADD);
                m.string(&key(rng));
                let delta = [1, -1, i64::MAX, i64::MIN, rng.next() as i64][rng.index(5)];
                m.bytes.extend_from_slice(&delta.to_le_bytes());
            }
            5..=7 => {
                // WAIT is for keys that are set, so that a well-formed one is answered.
                let (cmd, n) = ([CHECK, WAIT, MULTI_GET][rng.index(3)], rng.below(4));
                m.cmd(cmd);
                m.length(n);
                for _ in 0..n {
                    m.string(if cmd == WAIT { &b"/num"[..] } else { &b"/f0"[..] });
                }
            }
            8 => m.cmd(GETNUMKEYS),
            9 => {
                m.cmd(DELETE_KEY);
                m.string(b"/gone");
            }
            10 => {
                let n = rng.below(3);
                m.cmd(MULTI_SET);
                m.length(n);
                for _ in 0..n {
                    m.string(&key(rng));
                    m.string(&value(rng));
                }
            }
            11 => m.cmd(CANCEL_WAIT),
            _ => {
                m.cmd(PING);
                m.bytes.extend_from_slice(&(rng.next() as u32).to_le_bytes());
            }
        }
    }
    m
}

/// One or two of: bit flips, a truncation, a length field set to a hostile value, a
/// command byte set to any byte, bytes overwritten, inserted or appended, everything after
/// the handshake replaced by random bytes.
fn mutate(rng: &mut Rng, m: &mut Msg) {
    for _ in 0..1 + rng.below(2) {
        let len = m.bytes.len();
        if len == 0 {
            return;
        }
        match rng.below(8) {
            0 => {
                for _ in 0..1 + rng.below(4) {
                    let bit = rng.index(8 * len);
                    m.bytes[bit / 8] ^= 1 << (bit % 8);
                }
            }
            1 => m.bytes.truncate(rng.index(len + 1)),
            2 | 3 => {
                let Some(&at) = m.lengths.get(rng.index(m.lengths.len().max(1))) else { continue };
                let n = HOSTILE_LENGTHS[rng.index(HOSTILE_LENGTHS.len())];
                if at + 8 <= len {
                    m.bytes[at..at + 8].copy_from_slice(&n.to_le_bytes());
                }
            }
            4 => {
                let Some(&at) = m.commands.get(rng.index(m.commands.len())) else { continue };
                if at < len {
                    m.bytes[at] = rng.next() as u8;
                }
            }
            5 => {
                let at = rng.index(len + 1);
                let n = 1 + rng.index(16);
                let junk = rng.bytes(n);
                m.bytes.splice(at..at, junk);
            }
            6 => {
                let at = rng.index(len.max(1));
                if at < len {
                    m.bytes[at] = rng.next() as u8;
                }
            }
            _ => {
                let n = rng.index(64);
                let junk = rng.bytes(n);
                if rng.below(2) == 0 {
                    m.bytes.truncate(5);
                }
                m.bytes.extend_from_slice(&junk);
            }
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    let shown: String = bytes.iter().take(96).map(|b| format!("{b:02x}")).collect();
    if bytes.len() > 96 {
        format!("{shown}..")
    } else {
        shown
    }
}

/// A raw connection to `addr`, every call bounded by [`DEADLINE`].
fn raw(addr: &str) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.set_write_timeout(Some(DEADLINE)).unwrap();
    s
}

/// Reads what the host still sends until it closes the connection, and returns it; an
/// `Err` if it neither closes nor stops sending within [`DEADLINE`].
fn until_closed(s: &mut TcpStream) -> io::Result<Vec<u8>> {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(io::Error::other(format!("the host kept the connection open for {:?}", start.elapsed())));
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return Ok(got), // reset: closed too
        }
        if got.len() > 8 << 20 || start.elapsed() > DEADLINE {
            return Err(io::Error::other(format!("the host sent {} bytes and did not close", got.len())));
        }
    }
}

/// A fresh client sets, reads back and counts a key of its own (`health/{tag}`), within
/// [`DEADLINE`]; what went wrong if not.
fn answers(addr: &str, tag: &str) -> Result<(), String> {
    let start = Instant::now();
    let key = format!("health/{tag}");
    let check = || -> crate::error::Result<bool> {
        let c = TcpStore::connect(addr, DEADLINE)?;
        c.set(&key, tag.as_bytes())?;
        Ok(c.get(&key)? == tag.as_bytes() && c.add(&format!("{key}/n"), 2)? == 2)
    };
    match check() {
        Ok(true) if start.elapsed() < DEADLINE => Ok(()),
        Ok(true) => Err(format!("the host took {:?} to answer a well-formed client", start.elapsed())),
        Ok(false) => Err("the host gave a well-formed client wrong answers".into()),
        Err(e) => Err(format!("the host stopped answering a well-formed client: {e}")),
    }
}

fn host() -> (TcpStore, String) {
    let store = TcpStore::serve("127.0.0.1:0", 1, DEADLINE).unwrap();
    let addr = store.local_addr().unwrap().to_string();
    store.set("num", b"12").unwrap();
    store.set("text", b"twelve").unwrap();
    store.set("f0", b"zero").unwrap();
    store.get("f0").unwrap(); // a set has no reply: this makes sure the host has them
    (store, addr)
}

/// Waits until the host serves no connection but its own client's: every hostile one
/// was closed, and its thread and descriptor went with it.
fn conns_drain(store: &TcpStore) {
    let start = Instant::now();
    let server = store.server.as_ref().unwrap();
    while server.open_conns() > 1 {
        assert!(start.elapsed() < DEADLINE, "{} connections still open", server.open_conns());
        thread::sleep(Duration::from_millis(5));
    }
}

/// 2000 seeded cases (about 1 s in a debug build): the handshake and one to three
/// requests of every kind, mutated (see [`mutate`]), from a raw client that then closes
/// its side (5 cases in 8), drops the connection (1 in 8), or stalls (1 in 4). After a
/// close the host must close too within 5 s (it answered or refused what it got); while
/// a client stalls, and after every case, a fresh client must be served. No thread of the host panics, and at the
/// end every hostile connection is gone from the host.
#[test]
fn hostile_clients_get_closed_and_the_host_keeps_serving() {
    const CASES: u64 = 2000;
    const SEED: u64 = 0x5EED_0038_0004_0001;
    let panics = host_panics();
    let (store, addr) = host();
    let start = Instant::now();
    for case in 0..CASES {
        let seed = SEED ^ case.wrapping_mul(0x9E37_79B9);
        let mut rng = Rng::new(seed);
        let mut m = requests(&mut rng);
        mutate(&mut rng, &mut m);
        let ending = rng.below(8);
        let what = || format!("case {case} (seed {seed:#x}, ending {ending}, bytes {})", hex(&m.bytes));
        let mut s = raw(&addr);
        let _ = s.write_all(&m.bytes); // the host may have closed already
        if ending == 0 {
            drop(s);
        } else {
            if ending >= 6 {
                // While this client stalls.
                answers(&addr, &format!("{case}-stalled")).unwrap_or_else(|e| panic!("{}: {e}", what()));
            }
            let _ = s.shutdown(Shutdown::Write);
            if let Err(e) = until_closed(&mut s) {
                panic!("{}: {e}", what());
            }
        }
        answers(&addr, &case.to_string()).unwrap_or_else(|e| panic!("{}: {e}", what()));
        assert_eq!(host_panics(), panics, "a thread of the host panicked in {}", what());
    }
    conns_drain(&store);
    eprintln!("{CASES} hostile clients in {:?}", start.elapsed());
}

/// 44 targeted cases: a length, count or key count over its cap (`MAX_KEY`, `MAX_VALUE`,
/// `MAX_KEYS`; up to `u64::MAX`, and `i64::MIN`, as a signed reader sees a negative) in
/// every field that has one, from a client that then stalls: the host must refuse it at
/// once, closing the connection with no reply and no bytes to wait for, rather than
/// allocate or wait for bytes that will never come.
#[test]
fn lengths_over_the_caps_are_refused_at_once() {
    let panics = host_panics();
    let (store, addr) = host();
    let over = |cap: u64| [cap + 1, u32::MAX as u64 + 1, i64::MIN as u64, u64::MAX];
    let mut cases: Vec<(String, Vec<u8>)> = Vec::new();
    for n in over(MAX_KEY) {
        for cmd in [SET, APPEND, COMPARE_SET, GET, ADD, DELETE_KEY] {
            let mut m = Msg::default();
            m.cmd(cmd);
            m.length(n);
            cases.push((format!("command {cmd}, key length {n}"), m.bytes));
        }
    }
    for n in over(MAX_VALUE) {
        let mut m = Msg::default();
        m.cmd(SET);
        m.string(b"/v");
        m.length(n);
        cases.push((format!("SET, value length {n}"), m.bytes));
    }
    for n in over(MAX_KEYS) {
        for cmd in [CHECK, WAIT, MULTI_GET, MULTI_SET] {
            let mut m = Msg::default();
            m.cmd(cmd);
            m.length(n);
            cases.push((format!("command {cmd}, {n} keys"), m.bytes));
        }
    }
    assert_eq!(cases.len(), 44);
    for (what, bytes) in &cases {
        let mut s = raw(&addr);
        let t = Instant::now();
        s.write_all(&[VALIDATE]).unwrap();
        s.write_all(&MAGIC.to_le_bytes()).unwrap();
        s.write_all(bytes).unwrap();
        // No shutdown: the host must close on its own.
        let got = until_closed(&mut s).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(got.is_empty(), "{what}: the host answered {}", hex(&got));
        assert!(t.elapsed() < Duration::from_secs(2), "{what}: refused after {:?}", t.elapsed());
        answers(&addr, what).unwrap_or_else(|e| panic!("{what}: {e}"));
    }
    assert_eq!(host_panics(), panics, "a thread of the host panicked");
    conns_drain(&store);
}

/// 16 clients each announce a value of `MAX_VALUE` (1 GiB, within the cap) and send
/// only 1 KiB of it: the host must not reserve the announced GiB (the process's address
/// space grows by far less than 16 GiB), and a 3 MiB value sent in full still arrives
/// whole. Then the clients leave and the host closes their connections.
#[cfg(target_os = "linux")]
#[test]
fn announced_lengths_cost_no_memory_until_their_bytes_arrive() {
    fn vm_bytes() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmSize:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
    }
    let panics = host_panics();
    let (store, addr) = host();
    let before = vm_bytes();
    let mut clients: Vec<TcpStream> = (0..16)
        .map(|i| {
            let mut m = Msg::default();
            m.cmd(VALIDATE);
            m.bytes.extend_from_slice(&MAGIC.to_le_bytes());
            m.cmd(SET);
            m.string(format!("/big{i}").as_bytes());
            m.length(MAX_VALUE);
            m.bytes.extend_from_slice(&[7; 1024]);
            let mut s = raw(&addr);
            s.write_all(&m.bytes).unwrap();
            s
        })
        .collect();
    // The host reads the lengths at once; give it the time, watching the address space.
    let watch = Instant::now();
    while watch.elapsed() < Duration::from_millis(300) {
        let grown = vm_bytes().saturating_sub(before);
        assert!(grown < 8 << 30, "16 announced GiB grew the address space by {grown} bytes");
        thread::sleep(Duration::from_millis(10));
    }
    answers(&addr, "while 16 GiB are announced").unwrap();
    let big: Vec<u8> = (0..3 << 20).map(|i: u32| (i * 7 + i / 4096) as u8).collect();
    store.set("three-mib", &big).unwrap();
    assert!(store.get("three-mib").unwrap() == big, "a 3 MiB value came back changed");
    for s in &mut clients {
        s.shutdown(Shutdown::Write).unwrap();
        until_closed(s).unwrap();
    }
    assert_eq!(host_panics(), panics, "a thread of the host panicked");
    conns_drain(&store);
}

/// A `MULTI_GET` of one 1 MiB value 1025 times asks for a reply over `MAX_REPLY` (1 GiB)
/// in a 13 KiB request: the host refuses it (closes, no reply) instead of building the
/// reply; 3 times is answered in full.
#[test]
fn a_reply_over_the_cap_is_refused() {
    let panics = host_panics();
    let (store, addr) = host();
    let value = vec![0x5A; 1 << 20];
    store.set("mib", &value).unwrap();
    store.get("mib").unwrap();
    let multi_get = |n: u64| {
        let mut m = Msg::default();
        m.cmd(VALIDATE);
        m.bytes.extend_from_slice(&MAGIC.to_le_bytes());
        m.cmd(MULTI_GET);
        m.length(n);
        (0..n).for_each(|_| m.string(b"/mib"));
        let mut s = raw(&addr);
        s.write_all(&m.bytes).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        until_closed(&mut s).unwrap()
    };
    let t = Instant::now();
    let got = multi_get(1025);
    assert!(got.is_empty(), "the host answered {} bytes", got.len());
    assert!(t.elapsed() < Duration::from_secs(2), "refused after {:?}", t.elapsed());
    let got = multi_get(3);
    assert_eq!(got.len(), 3 * (8 + value.len()));
    for part in got.chunks(8 + value.len()) {
        assert_eq!(u64::from_le_bytes(part[..8].try_into().unwrap()), 1 << 20);
        assert!(part[8..] == value[..]);
    }
    answers(&addr, "after a refused MULTI_GET").unwrap();
    assert_eq!(host_panics(), panics, "a thread of the host panicked");
    conns_drain(&store);
}

/// A peer opens 16 connections more than `MAX_CONNS` (256 in tests; the host's own
/// client holds one): the host closes the ones over the cap at once and answers a `PING`
/// on every other; once they are gone, it serves new clients again.
#[test]
fn connections_over_the_cap_are_closed() {
    let panics = host_panics();
    let (store, addr) = host();
    let mut conns: Vec<TcpStream> = (0..MAX_CONNS + 16).map(|_| raw(&addr)).collect();
    let mut served = 0;
    for (i, s) in conns.iter_mut().enumerate() {
        let mut ping = vec![VALIDATE];
        ping.extend_from_slice(&MAGIC.to_le_bytes());
        ping.push(PING);
        ping.extend_from_slice(&(i as u32).to_le_bytes());
        let _ = s.write_all(&ping);
        let mut pong = [0; 4];
        match s.read_exact(&mut pong) {
            Ok(()) => {
                assert_eq!(u32::from_le_bytes(pong), i as u32);
                served += 1;
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("connection {i} neither served nor closed in {DEADLINE:?}")
            }
            Err(_) => {} // closed
        }
    }
    assert_eq!(served, MAX_CONNS - 1, "connections served besides the host's own client");
    drop(conns);
    conns_drain(&store);
    answers(&addr, "after a flood").unwrap();
    assert_eq!(host_panics(), panics, "a thread of the host panicked");
}

/// What a correct client makes of the host's reply bytes to its connect (`ADD`, 8
/// bytes), `WAIT` (1 byte) and `GET` (a length and the value): the value, or `None`
/// for an error.
fn client_reads(bytes: &[u8]) -> Option<Vec<u8>> {
    if bytes.len() < 17 || bytes[8] != 0 {
        return None;
    }
    let n = u64::from_le_bytes(bytes[9..17].try_into().unwrap());
    (n <= MAX_VALUE && bytes.len() as u64 >= 17 + n).then(|| bytes[17..17 + n as usize].to_vec())
}

/// 256 seeded cases (about 1 s in a debug build; one in 16 stalls): a raw host answers a
/// real client's `connect` and `get` with the right replies, mutated (bit flips, a
/// truncation, the value's length set to a hostile value, bytes changed, inserted or
/// appended), then closes or stalls. The client must return the value the bytes encode
/// or an `Err` of the store, within its timeout (three times it when a wait is
/// cancelled), and never read a length beyond `MAX_VALUE`.
#[test]
fn a_hostile_host_gives_the_client_errors_not_hangs() {
    const CASES: u64 = 256;
    const SEED: u64 = 0x5EED_0038_0004_0002;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let start = Instant::now();
    let mut values = 0;
    for case in 0..CASES {
        let seed = SEED ^ case.wrapping_mul(0x9E37_79B9);
        let mut rng = Rng::new(seed);
        let mut m = Msg::default();
        m.bytes.extend_from_slice(&1i64.to_le_bytes()); // ADD "init/" 1
        m.bytes.push(0); // WAIT: STOP_WAITING
        m.string(b"hello"); // GET
        for _ in 0..1 + rng.below(2) {
            let len = m.bytes.len();
            if len == 0 {
                break;
            }
            match rng.below(6) {
                0 => {
                    let bit = rng.index(8 * len);
                    m.bytes[bit / 8] ^= 1 << (bit % 8);
                }
                1 => m.bytes.truncate(rng.index(len + 1)),
                2 | 3 if len >= 17 => {
                    let n = HOSTILE_LENGTHS[rng.index(HOSTILE_LENGTHS.len())];
                    m.bytes[9..17].copy_from_slice(&n.to_le_bytes());
                }
                4 => {
                    let at = rng.index(len + 1);
                    let n = 1 + rng.index(8);
                    let junk = rng.bytes(n);
                    m.bytes.splice(at..at, junk);
                }
                _ => {
                    let n = rng.index(32);
                    let junk = rng.bytes(n);
                    m.bytes.extend_from_slice(&junk);
                }
            }
        }
        let stall = rng.below(16) == 0;
        let timeout = if stall { Duration::from_millis(100) } else { DEADLINE };
        let want = client_reads(&m.bytes);
        let what = format!("case {case} (seed {seed:#x}, stall {stall}, bytes {})", hex(&m.bytes));

        // The host: it reads each request before it sends the reply's bytes (8, 1, the
        // rest), so that it never closes on bytes it has not read.
        let host = {
            let listener = listener.try_clone().unwrap();
            let bytes = m.bytes.clone();
            thread::spawn(move || {
                let (mut s, _) = listener.accept().unwrap();
                s.set_read_timeout(Some(DEADLINE)).unwrap();
                s.set_write_timeout(Some(DEADLINE)).unwrap();
                let request = [5 + 22, 1 + 8 + 8 + 2, 1 + 8 + 2]; // hello+ADD, WAIT, GET of "/k"
                let mut at = 0;
                for (i, n) in request.into_iter().enumerate() {
                    if s.read_exact(&mut vec![0; n]).is_err() {
                        return; // the client gave up
                    }
                    let end = if i == 2 { bytes.len() } else { (at + [8, 1][i]).min(bytes.len()) };
                    if s.write_all(&bytes[at..end]).is_err() {
                        return;
                    }
                    at = end;
                    if at == bytes.len() {
                        break;
                    }
                }
                if stall {
                    let _ = io::copy(&mut s, &mut io::sink()); // until the client leaves
                }
            })
        };
        let t = Instant::now();
        let got = TcpStore::connect(&addr, timeout).and_then(|c| c.get("k"));
        let took = t.elapsed();
        host.join().unwrap();
        assert!(took < 3 * timeout + Duration::from_secs(1), "{what}: the client took {took:?}");
        match (got, want) {
            (Ok(v), Some(w)) => {
                assert_eq!(v, w, "{what}");
                values += 1;
            }
            (Ok(v), None) => panic!("{what}: the client read {} from bytes that encode no value", hex(&v)),
            (Err(Error::Dist { op: "store.connect" | "store.get", .. }), None) => {}
            (Err(Error::Dist { op: "store.get", reason }), Some(_)) if stall && reason.contains("within") => {}
            (Err(e), _) => panic!("{what}: {e:?}"),
        }
    }
    eprintln!("{CASES} hostile hosts in {:?}: {values} values read, the others errors", start.elapsed());
}
