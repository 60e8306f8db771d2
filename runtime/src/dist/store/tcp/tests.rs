use std::io::Read;

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

/// Every thread locus starts is named `locus-…` (the fault campaign tells locus's threads
/// from the driver's by that): the store's accept thread too. The kernel keeps the first
/// 15 bytes of a thread's name.
#[cfg(target_os = "linux")]
#[test]
fn the_store_names_its_thread() {
    let (_store, _) = host(1, T);
    let names: Vec<String> = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .collect();
    assert!(names.iter().any(|n| n == "locus-store-acc"), "no thread named locus-store-accept among {names:?}");
}
