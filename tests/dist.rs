//! `locus::dist` across real processes on this machine: each test runs its own binary
//! again, once per rank (`tests/common/ranks.rs`); the ranks meet through a `FileStore`
//! in a fresh temporary directory. Each rank checks every collective against
//! the same computation done in one process and exits non-zero on a difference; the
//! parent waits for all of them (killing them after a deadline) and asserts that each
//! succeeded, showing their output when one did not.

use std::fmt::Debug;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

mod common;
use common::ranks::run_ranks;

use locus::dist::{FileStore, ProcessGroup, ReduceOp, Store};
use locus::{Cpu, Cuda, Device, DeviceId, Dyn, Element, Tensor};

/// The group's timeout in the tests that expect success: long, as a loaded machine may
/// be slow; it only matters when something is wrong.
const LONG: Duration = Duration::from_secs(30);

fn join(rank: usize, world: usize, dir: &Path, timeout: Duration) -> Result<(Arc<dyn Store>, ProcessGroup), String> {
    let store: Arc<dyn Store> = Arc::new(FileStore::new(dir, LONG).map_err(|e| e.to_string())?);
    let pg = ProcessGroup::new(Arc::clone(&store), rank, world, timeout).map_err(|e| e.to_string())?;
    Ok((store, pg))
}

/// The arithmetic of the expected values, written out per type.
trait Num: Element {
    fn plus(self, o: Self) -> Self;
    fn div_by(self, n: usize) -> Self;
}

impl Num for f32 {
    fn plus(self, o: Self) -> Self {
        self + o
    }
    fn div_by(self, n: usize) -> Self {
        self / n as f32
    }
}

impl Num for f64 {
    fn plus(self, o: Self) -> Self {
        self + o
    }
    fn div_by(self, n: usize) -> Self {
        self / n as f64
    }
}

impl Num for i32 {
    fn plus(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
    fn div_by(self, n: usize) -> Self {
        self / n as i32
    }
}

impl Num for u8 {
    fn plus(self, o: Self) -> Self {
        self.wrapping_add(o)
    }
    fn div_by(self, n: usize) -> Self {
        self / n as u8
    }
}

/// Rank `rank`'s `n` elements: different on every rank, with fractions (floats) so that
/// the order of a sum shows in its bits, and large enough that `u8` sums wrap.
fn input<T: Num>(rank: usize, n: usize) -> Vec<T> {
    (0..n)
        .map(|i| {
            let k = ((rank * 31 + i * 17) % 23) as f64;
            if T::DTYPE.is_float() {
                T::from_f64(k * 0.37 - 3.3 + rank as f64 * 1e-3)
            } else {
                T::from_f64(k * 11.0)
            }
        })
        .collect()
}

/// The reduction of every rank's `input`, one rank after the other.
fn expected<T: Num>(op: ReduceOp, world: usize, n: usize) -> Vec<T> {
    let mut acc = input::<T>(0, n);
    for r in 1..world {
        for (a, b) in acc.iter_mut().zip(input::<T>(r, n)) {
            *a = match op {
                ReduceOp::Sum | ReduceOp::Avg => a.plus(b),
                ReduceOp::Max if b > *a => b,
                ReduceOp::Min if b < *a => b,
                _ => *a,
            };
        }
    }
    if op == ReduceOp::Avg {
        acc.iter_mut().for_each(|a| *a = a.div_by(world));
    }
    acc
}

/// `got` equals `want` bit for bit (`{:?}` of a float is exact, and tells -0.0 from 0.0).
fn same<T: Debug>(what: &str, got: &[T], want: &[T]) -> Result<(), String> {
    let (g, w) = (format!("{got:?}"), format!("{want:?}"));
    if g == w {
        Ok(())
    } else {
        Err(format!("{what}: got {}, want {}", short(&g), short(&w)))
    }
}

fn short(s: &str) -> &str {
    &s[..s.len().min(300)]
}

/// `all_reduce` with every op on `device`, checked against [`expected`].
fn check_all_reduce<D: Device, T: Num>(pg: &ProcessGroup, device: D, shape: &[usize]) -> Result<(), String> {
    let (rank, world) = (pg.rank(), pg.world_size());
    let n = shape.iter().product();
    let t = Tensor::<D, T>::from_vec_on(device, input(rank, n), shape).map_err(|e| e.to_string())?;
    for op in [ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min] {
        let what = format!("all_reduce {op:?} of {} {shape:?} on {}", T::DTYPE, device.id());
        let out = pg.all_reduce(&t, op).map_err(|e| format!("{what}: {e}"))?;
        if out.device() != device.id() || out.shape() != shape {
            return Err(format!("{what}: the result is {:?} on {}", out.shape(), out.device()));
        }
        same(&what, &out.to_vec().map_err(|e| e.to_string())?, &expected::<T>(op, world, n))?;
    }
    Ok(())
}

/// Every collective, each checked; the body of the 2- and 4-rank tests.
fn every_collective(rank: usize, world: usize, dir: &Path) -> Result<(), String> {
    let (store, pg) = join(rank, world, dir, LONG)?;
    let e = |e: locus::Error| e.to_string();
    if (pg.rank(), pg.world_size()) != (rank, world) {
        return Err(format!("the group says rank {} of {}", pg.rank(), pg.world_size()));
    }

    check_all_reduce::<_, f32>(&pg, Cuda::<0>, &[3, 5])?;
    check_all_reduce::<_, f64>(&pg, Cpu, &[7])?;
    check_all_reduce::<_, i32>(&pg, Dyn::new(DeviceId::Cuda(0)), &[2, 2, 3])?;
    check_all_reduce::<_, u8>(&pg, Cpu, &[9])?;
    check_all_reduce::<_, f32>(&pg, Cpu, &[])?;
    // Large enough (1 MiB from each rank to each other) that the ranks' writes to each
    // other fill the sockets' buffers: they must not wait on each other.
    let big = 1 << 18;
    let t = Tensor::<Cpu>::from_vec(input(rank, big), [big]).map_err(e)?;
    let out = pg.all_reduce(&t, ReduceOp::Sum).map_err(e)?;
    same("all_reduce of 2^18 f32", &out.to_vec().map_err(e)?, &expected::<f32>(ReduceOp::Sum, world, big))?;

    for root in [0, world - 1] {
        let t = Tensor::<Cuda<0>, f64>::from_vec(input(rank, 6), [2, 3]).map_err(e)?;
        let out = pg.broadcast(&t, root).map_err(e)?;
        same(&format!("broadcast from {root}"), &out.to_vec().map_err(e)?, &input::<f64>(root, 6))?;
    }

    let t = Tensor::<Cpu, i32>::from_vec(input(rank, 4), [4]).map_err(e)?;
    let all = pg.all_gather(&t).map_err(e)?;
    if all.len() != world {
        return Err(format!("all_gather gave {} tensors", all.len()));
    }
    for (r, x) in all.iter().enumerate() {
        same(&format!("all_gather, rank {r}'s part"), &x.to_vec().map_err(e)?, &input::<i32>(r, 4))?;
    }

    // reduce_scatter: chunk `rank` of the all_reduce, bit for bit.
    let n = world * 2 * 3;
    let t = Tensor::<Cpu>::from_vec(input(rank, n), [world * 2, 3]).map_err(e)?;
    for op in [ReduceOp::Sum, ReduceOp::Max] {
        let out = pg.reduce_scatter(&t, op).map_err(e)?;
        if out.shape() != [2, 3] {
            return Err(format!("reduce_scatter gave shape {:?}", out.shape()));
        }
        let want = expected::<f32>(op, world, n)[rank * 6..(rank + 1) * 6].to_vec();
        same(&format!("reduce_scatter {op:?}"), &out.to_vec().map_err(e)?, &want)?;
    }

    // A ring of send/recv: even ranks send first, odd ranks receive first.
    let (next, prev) = ((rank + 1) % world, (rank + world - 1) % world);
    let mine = Tensor::<Cpu, u8>::from_vec(input(rank, 5), [5]).map_err(e)?;
    let got = if rank % 2 == 0 {
        pg.send(&mine, next).map_err(e)?;
        pg.recv::<Cpu, u8>(prev, [5]).map_err(e)?
    } else {
        let got = pg.recv::<Cpu, u8>(prev, [5]).map_err(e)?;
        pg.send(&mine, next).map_err(e)?;
        got
    };
    same("recv from the previous rank", &got.to_vec().map_err(e)?, &input::<u8>(prev, 5))?;

    // The `_async` forms, started around a synchronous call: the group runs them in the
    // order they were asked for, on every rank alike.
    let t = Tensor::<Cpu, f64>::from_vec(input(rank, world * 4), [world * 2, 2]).map_err(e)?;
    let reduced = pg.all_reduce_async(&t, ReduceOp::Avg).map_err(e)?;
    let gathered = pg.all_gather_async(&t).map_err(e)?;
    let from_last = pg.broadcast(&t, world - 1).map_err(e)?;
    let mut scattered = pg.reduce_scatter_async(&t, ReduceOp::Min).map_err(e)?;
    let sent = pg.broadcast_async(&t, 0).map_err(e)?;
    let n = world * 4;
    same("broadcast between async calls", &from_last.to_vec().map_err(e)?, &input::<f64>(world - 1, n))?;
    let _ = scattered.is_complete().map_err(e)?;
    let want = expected::<f64>(ReduceOp::Min, world, n)[rank * 4..(rank + 1) * 4].to_vec();
    same("reduce_scatter_async", &scattered.wait().map_err(e)?.to_vec().map_err(e)?, &want)?;
    same(
        "all_reduce_async",
        &reduced.wait().map_err(e)?.to_vec().map_err(e)?,
        &expected::<f64>(ReduceOp::Avg, world, n),
    )?;
    let all = gathered.wait().map_err(e)?;
    for (r, x) in all.iter().enumerate() {
        same(&format!("all_gather_async, rank {r}'s part"), &x.to_vec().map_err(e)?, &input::<f64>(r, n))?;
    }
    same("broadcast_async", &sent.synchronize().map_err(e)?.to_vec().map_err(e)?, &input::<f64>(0, n))?;

    // The store counts across processes.
    for _ in 0..5 {
        store.add("count", 1).map_err(e)?;
    }
    pg.barrier().map_err(e)?;
    let count = store.get("count").map_err(e)?;
    if count != (5 * world).to_string().as_bytes() {
        return Err(format!("the count is {:?}, want {}", String::from_utf8_lossy(&count), 5 * world));
    }
    pg.barrier().map_err(e)
}

#[test]
fn two_ranks_agree_on_every_collective() {
    run_ranks("two_ranks_agree_on_every_collective", 2, every_collective);
}

#[test]
fn four_ranks_agree_on_every_collective() {
    run_ranks("four_ranks_agree_on_every_collective", 4, every_collective);
}

/// Rank 2 of 3 exits right after the rendezvous; the others' next `all_reduce` must
/// fail, naming rank 2, well within the group's timeout.
fn one_rank_exits(rank: usize, world: usize, dir: &Path) -> Result<(), String> {
    let timeout = Duration::from_secs(3);
    let (_store, pg) = join(rank, world, dir, timeout)?;
    pg.barrier().map_err(|e| e.to_string())?;
    if rank == 2 {
        std::process::exit(0);
    }
    let t = Tensor::<Cpu>::ones([4]).map_err(|e| e.to_string())?;
    let start = Instant::now();
    match pg.all_reduce(&t, ReduceOp::Sum) {
        Ok(x) => Err(format!("all_reduce without rank 2 succeeded: {:?}", x.to_vec())),
        Err(e) => {
            let (took, e) = (start.elapsed(), e.to_string());
            if took > timeout {
                Err(format!("the error took {took:?}, beyond the timeout {timeout:?}: {e}"))
            } else if !e.contains("rank 2") || !e.contains("all_reduce") {
                Err(format!("the error does not name rank 2 and all_reduce: {e}"))
            } else {
                println!("rank {rank}: after {took:?}: {e}");
                Ok(())
            }
        }
    }
}

#[test]
fn a_rank_that_exits_fails_the_others_next_all_reduce() {
    run_ranks("a_rank_that_exits_fails_the_others_next_all_reduce", 3, one_rank_exits);
}

/// Through `dist::init_with`: rank 0 hosts the TCP store (PyTorch's protocol) on a port it
/// picks and writes into the shared directory; the others connect to it.
fn through_init(rank: usize, world: usize, dir: &Path) -> Result<(), String> {
    use locus::dist::{init_with, Launch};
    let port_file = dir.join("port");
    let port: u16 = if rank == 0 {
        let port =
            std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(|e| e.to_string())?.port();
        std::fs::write(dir.join("port.tmp"), port.to_string()).map_err(|e| e.to_string())?;
        std::fs::rename(dir.join("port.tmp"), &port_file).map_err(|e| e.to_string())?;
        port
    } else {
        let start = Instant::now();
        loop {
            if let Ok(p) = std::fs::read_to_string(&port_file) {
                break p.trim().parse().map_err(|e| format!("port file: {e}"))?;
            }
            if start.elapsed() > LONG {
                return Err("rank 0 never wrote its port".into());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    let launch = Launch::builder()
        .rank(rank, world)
        .local_rank(rank, world)
        .master("127.0.0.1", port)
        .build()
        .map_err(|e| e.to_string())?;
    let d = init_with(launch, LONG).map_err(|e| e.to_string())?;
    if (d.rank(), d.world_size()) != (rank, world) {
        return Err(format!("joined as {} of {}", d.rank(), d.world_size()));
    }
    let mine = Tensor::<Cpu>::full([3], (rank + 1) as f32).map_err(|e| e.to_string())?;
    let sum = d.group().all_reduce(&mine, ReduceOp::Sum).map_err(|e| e.to_string())?;
    let want = (world * (world + 1) / 2) as f32;
    same("all_reduce through init", &sum.to_vec().map_err(|e| e.to_string())?, &[want; 3])?;
    d.store().set(&format!("hello/{rank}"), format!("{rank}").as_bytes()).map_err(|e| e.to_string())?;
    let next = (rank + 1) % world;
    let got = d.store().get(&format!("hello/{next}")).map_err(|e| e.to_string())?;
    same("store round trip", &got, format!("{next}").as_bytes())?;
    // A sub-group of the first and last ranks: they reduce between themselves only.
    let ends = [0, world - 1];
    match d.new_group(&ends).map_err(|e| e.to_string())? {
        Some(g) => {
            let sum = g.all_reduce(&mine, ReduceOp::Sum).map_err(|e| e.to_string())?;
            same("sub-group all_reduce", &sum.to_vec().map_err(|e| e.to_string())?, &[(1 + world) as f32; 3])?;
            if (g.rank(), g.world_size()) != (usize::from(rank != 0), 2) {
                return Err(format!("sub-group rank {} of {}", g.rank(), g.world_size()));
            }
        }
        None if ends.contains(&rank) => return Err("a member got no sub-group".into()),
        None => {}
    }
    if d.new_group(&[0, 0]).is_ok() {
        return Err("a sub-group with a repeated rank was accepted".into());
    }
    d.group().barrier().map_err(|e| e.to_string())
}

#[test]
fn three_ranks_join_through_init_and_the_tcp_store() {
    run_ranks("three_ranks_join_through_init_and_the_tcp_store", 3, through_init);
}

/// A world of one bound to `cuda:0`: every collective, synchronous and `_async`, on the
/// device. On the cuda backend with libnccl this runs NCCL (`LOCUS_EXPECT_NCCL=1` makes
/// the test insist on it, as the GPU run does); on the host backend, the TCP path.
#[test]
fn a_world_of_one_bound_to_its_device_runs_every_collective() {
    let dir = common::ranks::fresh_dir("world_of_one");
    let store: Arc<dyn Store> = Arc::new(FileStore::new(&dir, LONG).unwrap());
    let pg = ProcessGroup::new(store, 0, 1, LONG).unwrap().with_device(DeviceId::Cuda(0)).unwrap();
    let nccl = pg.uses_communicator();
    println!("backend {}, communicator: {nccl}", locus::backend_name().unwrap());
    if std::env::var("LOCUS_EXPECT_NCCL").is_ok_and(|v| v == "1") {
        assert!(nccl, "LOCUS_EXPECT_NCCL=1 but the group moves device tensors over TCP");
    }
    let x = Tensor::<Cuda<0>>::from_vec(input(0, 12), [6, 2]).unwrap();
    let want = input::<f32>(0, 12);
    for op in [ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min] {
        assert_eq!(pg.all_reduce(&x, op).unwrap().to_vec().unwrap(), want, "{op:?}");
        assert_eq!(pg.all_reduce_async(&x, op).unwrap().wait().unwrap().to_vec().unwrap(), want, "{op:?} async");
    }
    let ints = Tensor::<Cuda<0>, i32>::from_vec(vec![7, -9, 4], [3]).unwrap();
    assert_eq!(pg.all_reduce(&ints, ReduceOp::Avg).unwrap().to_vec().unwrap(), vec![7, -9, 4]);
    assert_eq!(pg.broadcast(&x, 0).unwrap().to_vec().unwrap(), want);
    let gathered = pg.all_gather_async(&x).unwrap().wait().unwrap();
    assert_eq!((gathered.len(), gathered[0].shape()), (1, &[6usize, 2][..]));
    assert_eq!(gathered[0].to_vec().unwrap(), want);
    let rs = pg.reduce_scatter(&x, ReduceOp::Sum).unwrap();
    assert_eq!((rs.shape(), rs.to_vec().unwrap()), (&[6usize, 2][..], want.clone()));
    // A result of the side stream used on the default stream: ordered by the usual rules.
    let mut work = pg.all_reduce_async(&x, ReduceOp::Sum).unwrap();
    let _ = work.is_complete().unwrap();
    let doubled = (work.wait().unwrap() * 2.0).unwrap();
    assert_eq!(doubled.to_vec().unwrap(), want.iter().map(|v| v * 2.0).collect::<Vec<_>>());
    // Host tensors still move over TCP.
    let h = Tensor::<Cpu, u8>::from_vec(vec![1, 2, 3], [3]).unwrap();
    assert_eq!(pg.all_reduce(&h, ReduceOp::Max).unwrap().to_vec().unwrap(), vec![1, 2, 3]);
    pg.barrier().unwrap();
    std::fs::remove_dir_all(dir).ok();
}

/// A world of one on `cuda:0` gives back every element of its input, whatever the length
/// (odd, around the 1 MiB cache limit, past 4 MiB) and the reduction, synchronous and
/// `_async`, with the result's memory dirtied first: a block freed just before holds
/// NaN, so an element the collective leaves unwritten shows. (DDP's bucket flag, the last
/// element of a 4 MiB + 4 byte input, came back with another tensor's data on an H100.)
#[test]
fn a_world_of_one_writes_every_element_of_every_length() -> locus::Result<()> {
    let dir = common::ranks::fresh_dir("world_of_one_lengths");
    let store: Arc<dyn Store> = Arc::new(FileStore::new(&dir, LONG)?);
    let pg = ProcessGroup::new(store, 0, 1, LONG)?.with_device(DeviceId::Cuda(0))?;
    let lens: &[usize] = if common::on_gpu() {
        &[1, 3, 255, 1025, 262_145, 1_048_577, 1_048_576 + 1024 + 1, 4_194_305]
    } else {
        &[1, 3, 1025]
    };
    let mut wrong = Vec::new();
    for &n in lens {
        let x = Tensor::<Cuda<0>>::arange(0.0, n as f32, 1.0)?;
        let want = x.to_vec()?;
        for op in [ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min] {
            for side in [false, true] {
                // The result is allocated where this NaN block was freed (the same stream's
                // cache or pool), on the current stream or the group's side stream.
                drop(Tensor::<Cuda<0>>::full([n], f32::NAN)?);
                let got = if side { pg.all_reduce_async(&x, op)?.wait()? } else { pg.all_reduce(&x, op)? };
                let got = got.to_vec()?;
                let bad: Vec<usize> = (0..n).filter(|&i| got[i].to_bits() != want[i].to_bits()).collect();
                if let (Some(&first), Some(&last)) = (bad.first(), bad.last()) {
                    wrong.push(format!(
                        "{op:?} (async: {side}) of {n}: {} elements wrong, {first}..={last}, [{first}] = {}",
                        bad.len(),
                        got[first]
                    ));
                }
            }
        }
    }
    assert!(wrong.is_empty(), "all_reduce over one rank changed its input:\n{}", wrong.join("\n"));
    std::fs::remove_dir_all(dir).ok();
    Ok(())
}

/// A tensor on a device other than the group's is an `Err` naming both devices.
#[test]
fn a_tensor_on_another_device_than_the_groups_is_an_error() {
    if !locus::testing::needs_devices(2).unwrap() {
        return;
    }
    let dir = common::ranks::fresh_dir("other_device");
    let store: Arc<dyn Store> = Arc::new(FileStore::new(&dir, LONG).unwrap());
    let pg = ProcessGroup::new(store, 0, 1, LONG).unwrap().with_device(DeviceId::Cuda(0)).unwrap();
    let t = Tensor::<Cuda<1>>::ones([2]).unwrap();
    let e = pg.all_reduce(&t, ReduceOp::Sum).unwrap_err().to_string();
    assert!(e.contains("cuda:1") && e.contains("bound to cuda:0"), "{e}");
    let e = pg.all_gather_async(&t).unwrap_err().to_string();
    assert!(e.contains("cuda:1") && e.contains("bound to cuda:0"), "{e}");
    assert!(ProcessGroup::new(Arc::new(FileStore::new(dir.join("b"), LONG).unwrap()), 0, 1, LONG)
        .unwrap()
        .with_device(DeviceId::Cpu)
        .is_err());
    std::fs::remove_dir_all(dir).ok();
}

/// NCCL's watchdog: a collective still unfinished after the group's timeout aborts the
/// communicator, and the next collective is an `Err` saying why, instead of a hang. A
/// dead peer needs two GPUs; here the collective of a world of one is kept waiting behind
/// about a second of matmuls, with a 50 ms timeout. Runs where the group has a
/// communicator (the cuda backend with libnccl); in a child process of its own, since it
/// aborts a communicator.
fn a_stuck_collective(_rank: usize, _world: usize, dir: &Path) -> Result<(), String> {
    let e = |e: locus::Error| e.to_string();
    let store: Arc<dyn Store> = Arc::new(FileStore::new(dir.join("store"), LONG).map_err(e)?);
    let timeout = Duration::from_millis(50);
    let pg = ProcessGroup::new(store, 0, 1, timeout).map_err(e)?.with_device(DeviceId::Cuda(0)).map_err(e)?;
    if !pg.uses_communicator() {
        println!("skipped: the group has no communicator on this backend");
        return Ok(());
    }
    let a = (Tensor::<Cuda<0>>::rand([4096, 4096], 1).map_err(e)? * 1e-3).map_err(e)?;
    let mut x = a.clone();
    // Under compute-sanitizer each matmul is slower by orders of magnitude, and the 300
    // would outlast the harness's deadline at the final synchronize: a sanitized run sets
    // `LOCUS_TEST_STUCK_MATMULS` to a few, still far past the 50 ms timeout there.
    let matmuls = std::env::var("LOCUS_TEST_STUCK_MATMULS").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    for _ in 0..matmuls {
        x = x.matmul(&a).map_err(e)?;
    }
    let queued = pg.all_reduce(&x, ReduceOp::Sum).map_err(e)?;
    let start = Instant::now();
    loop {
        match pg.all_reduce(&a, ReduceOp::Sum) {
            Err(err) => {
                let msg = err.to_string();
                if !msg.contains("did not finish within") || !msg.contains("all_reduce") {
                    return Err(format!("the error does not say what was stuck: {msg}"));
                }
                println!("after {:?}: {msg}", start.elapsed());
                break;
            }
            Ok(_) if start.elapsed() > Duration::from_secs(20) => {
                return Err("the stuck collective was never reported".into());
            }
            Ok(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
    // The device work still ends: no host wait hangs on the aborted collective.
    drop(queued);
    locus::synchronize(DeviceId::Cuda(0)).map_err(e)?;
    Ok(())
}

#[test]
fn a_collective_stuck_past_the_timeout_aborts_the_communicator() {
    run_ranks("a_collective_stuck_past_the_timeout_aborts_the_communicator", 1, a_stuck_collective);
}
