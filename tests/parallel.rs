//! Multi-device work on the selected backend: scatter and gather, broadcast, reductions,
//! collectives, peer access tokens and DataParallel.
//!
//! Every test asserts real results with one device; with two or more it also spreads
//! work over them. Run with `LOCUS_HOST_DEVICES=4` to cover four simulated GPUs.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use locus::parallel::{
    all_gather, all_reduce_sum, broadcast, can_access_peer, chunk_sizes, enable_peer_access, gather, reduce_add,
    scatter, scatter_sizes, DataParallel, Module,
};
use locus::{devices, Cpu, Cuda, Device, DeviceId, Dyn, Error, Tensor, ToDevice};

fn all() -> Vec<DeviceId> {
    devices().unwrap()
}

fn on_host() -> bool {
    locus::backend_name().unwrap() == "host"
}

/// `rows` rows of 3 distinct integers, so that any misplaced row shows.
fn batch(rows: usize) -> Tensor<Cpu, i32> {
    Tensor::<Cpu, i32>::arange(0, 3 * rows as i32, 1).unwrap().reshape([rows, 3]).unwrap()
}

#[test]
fn scatter_then_gather_round_trips_exactly() -> locus::Result<()> {
    let ids = all();
    for rows in [0, 1, 2, 3, 5, 7, 16, 33] {
        let x = batch(rows);
        let parts = scatter(&x, &ids)?;
        assert_eq!(parts.len(), ids.len());
        let sizes: Vec<usize> = parts.iter().map(|p| p.shape()[0]).collect();
        assert_eq!(sizes, chunk_sizes(rows, ids.len()), "{rows} rows");
        for (p, &id) in parts.iter().zip(&ids) {
            assert_eq!(p.device(), id);
            assert_eq!(&p.shape()[1..], &[3]);
        }
        assert_eq!(gather(&parts, Cpu)?.to_vec()?, x.to_vec()?, "{rows} rows");
        assert_eq!(gather(&parts, Dyn::new(ids[0]))?.device(), ids[0]);
    }
    let noise = Tensor::<Cpu>::rand([13, 4, 2], 9)?;
    let back = gather(&scatter(&noise, &ids)?, Cuda::<0>)?;
    assert_eq!(back.shape(), &[13, 4, 2]);
    assert_eq!(back.to_vec()?, noise.to_vec()?);
    Ok(())
}

#[test]
fn uneven_batches_split_as_evenly_as_possible() -> locus::Result<()> {
    for (len, n) in [(10, 4), (7, 2), (3, 4), (0, 3), (64, 3)] {
        let sizes = chunk_sizes(len, n);
        assert_eq!(sizes.len(), n);
        assert_eq!(sizes.iter().sum::<usize>(), len);
        assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1, "{sizes:?}");
        assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "larger pieces first: {sizes:?}");
    }
    // A typed list: the same device twice works everywhere.
    let x = batch(5);
    let (a, b) = scatter(&x, (Cuda::<0>, Cuda::<0>))?;
    assert_eq!((a.shape(), b.shape()), (&[3, 3][..], &[2, 3][..]));
    assert_eq!(b.to_vec()?, vec![9, 10, 11, 12, 13, 14]);
    let [p, q, r] = scatter(&x, [DeviceId::Cuda(0); 3])?;
    assert_eq!((p.shape()[0], q.shape()[0], r.shape()[0]), (2, 2, 1));
    if locus::testing::needs_devices_for(2, "the two-GPU typed scatter")? {
        let (a, b): (Tensor<Cuda<0>, i32>, Tensor<Cuda<1>, i32>) = scatter(&x, (Cuda::<0>, Cuda::<1>))?;
        assert_eq!(a.to_vec()?, vec![0, 1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(b.device(), DeviceId::Cuda(1));
        assert_eq!(gather(&(a, b), Cpu)?.to_vec()?, x.to_vec()?);
    }
    Ok(())
}

#[test]
fn scatter_sizes_takes_explicit_sizes_and_rejects_bad_ones() -> locus::Result<()> {
    let x = batch(6);
    let ids = [DeviceId::Cuda(0), *all().last().unwrap()];
    let [a, b] = scatter_sizes(&x, ids, &[1, 5])?;
    assert_eq!((a.shape()[0], b.shape()[0]), (1, 5));
    assert_eq!(gather(&[a, b], Cpu)?.to_vec()?, x.to_vec()?);
    for bad in [&[1, 4][..], &[6][..], &[3, 3, 0][..], &[usize::MAX, 7][..]] {
        let err = scatter_sizes(&x, ids, bad).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { op: "scatter", .. }), "{bad:?}: {err}");
    }
    Ok(())
}

#[test]
fn scatter_and_gather_reject_bad_input() -> locus::Result<()> {
    let scalar = Tensor::<Cpu>::full([], 1.0)?;
    assert!(matches!(scatter(&scalar, &all()), Err(Error::InvalidArgument { .. })));
    assert!(matches!(scatter(&batch(2), &[] as &[DeviceId]), Err(Error::InvalidArgument { .. })));
    let count = locus::device_count()?;
    let err = scatter(&batch(2), [DeviceId::Cuda(0), DeviceId::Cuda(99)]).unwrap_err();
    assert_eq!(err, Error::NoSuchDevice { ordinal: 99, count });
    let mixed = vec![Tensor::<Cpu>::ones([2, 3])?.into_dyn(), Tensor::<Cpu>::ones([2, 4])?.into_dyn()];
    assert!(matches!(gather(&mixed, Cpu), Err(Error::ShapeMismatch { op: "gather", .. })));
    let none: Vec<Tensor<Dyn>> = Vec::new();
    assert!(matches!(gather(&none, Cpu), Err(Error::InvalidArgument { op: "gather", .. })));
    assert!(matches!(reduce_add(&none, Cpu), Err(Error::InvalidArgument { op: "reduce_add", .. })));
    Ok(())
}

#[test]
fn broadcast_copies_to_every_device() -> locus::Result<()> {
    let ids = all();
    let w = Tensor::<Cpu>::rand([4, 5], 3)?;
    let expect = w.to_vec()?;
    // From the host, from a device of the list, from a device outside a sub-list, and to
    // a list naming a device twice.
    let on_last = w.to_dyn(*ids.last().unwrap())?;
    let cases: Vec<(Vec<Tensor<Dyn>>, Vec<DeviceId>)> = vec![
        (broadcast(&w, &ids)?, ids.clone()),
        (broadcast(&on_last, &ids)?, ids.clone()),
        (broadcast(&on_last, &ids[..1])?, ids[..1].to_vec()),
        (broadcast(&w, [ids[0], ids[0]])?.to_vec(), vec![ids[0], ids[0]]),
    ];
    for (copies, want) in cases {
        assert_eq!(copies.iter().map(|c| c.device()).collect::<Vec<_>>(), want);
        for c in &copies {
            assert_eq!(c.shape(), &[4, 5]);
            assert_eq!(c.to_vec()?, expect);
        }
    }
    let (a, b) = broadcast(&w, (Cuda::<0>, Cpu))?;
    assert_eq!((a.to_vec()?, b.to_vec()?), (expect.clone(), expect));
    assert!(broadcast(&w, &[] as &[DeviceId]).is_err());
    Ok(())
}

#[test]
fn reduce_add_sums_onto_the_output_device() -> locus::Result<()> {
    let ids = all();
    let parts: Vec<Tensor<Dyn>> = ids
        .iter()
        .enumerate()
        .map(|(i, &id)| Tensor::<Dyn>::full_on(Dyn::new(id), [2, 3], (i + 1) as f32))
        .collect::<locus::Result<_>>()?;
    let n = ids.len() as f32;
    let total = reduce_add(&parts, Cuda::<0>)?;
    assert_eq!(total.to_vec()?, vec![n * (n + 1.0) / 2.0; 6]);
    assert_eq!(reduce_add(&parts, Cpu)?.to_vec()?, total.to_vec()?);
    let bad = vec![parts[0].clone(), Tensor::<Cpu>::ones([3, 2])?.into_dyn()];
    assert!(matches!(reduce_add(&bad, Cpu), Err(Error::ShapeMismatch { op: "reduce_add", .. })));
    Ok(())
}

/// One `[4, 2]` tensor per device, `(i + 1) * [0, 1, .., 7]` on device `i`.
fn per_device<T: locus::Element>(ids: &[DeviceId], make: impl Fn(usize) -> T) -> locus::Result<Vec<Tensor<Dyn, T>>> {
    ids.iter()
        .enumerate()
        .map(|(i, &id)| {
            let data: Vec<T> = (0..8).map(|k| make((i + 1) * k)).collect();
            Tensor::<Dyn, T>::from_vec_on(Dyn::new(id), data, [4, 2])
        })
        .collect()
}

#[test]
fn all_reduce_sum_gives_every_device_the_sum() -> locus::Result<()> {
    let ids = all();
    let n = ids.len();
    let expect: Vec<f32> = (0..8).map(|k| (k * n * (n + 1) / 2) as f32).collect();
    let parts = per_device(&ids, |v| v as f32)?;
    let sums = all_reduce_sum(&parts[..])?;
    assert_eq!(sums.len(), n);
    for (s, &id) in sums.iter().zip(&ids) {
        assert_eq!(s.device(), id);
        assert_eq!(s.shape(), &[4, 2]);
        assert_eq!(s.to_vec()?, expect);
    }
    // Integers, and the copy path (a host placement in the list) give the same sums.
    let ints = per_device(&ids, |v| v as i32)?;
    let int_sums = all_reduce_sum(&ints)?;
    assert_eq!(int_sums[n - 1].to_vec()?, expect.iter().map(|&v| v as i32).collect::<Vec<_>>());
    let mut mixed = parts.clone();
    mixed.push(Tensor::<Cpu>::zeros([4, 2])?.into_dyn());
    let via_copies = all_reduce_sum(&mixed)?;
    assert_eq!(via_copies[n].device(), DeviceId::Cpu);
    assert_eq!(via_copies[n].to_vec()?, expect);
    if n >= 2 {
        let (a, b) = (parts[0].clone().try_into_device::<Cuda<0>>()?, parts[1].clone().try_into_device::<Cuda<1>>()?);
        let (a, b): (Tensor<Cuda<0>>, Tensor<Cuda<1>>) = all_reduce_sum(&(a, b))?;
        let two: Vec<f32> = (0..8).map(|k| (3 * k) as f32).collect();
        assert_eq!((a.to_vec()?, b.to_vec()?), (two.clone(), two));
    }
    let bad = vec![parts[0].clone(), Tensor::<Cpu>::ones([8])?.into_dyn()];
    assert!(matches!(all_reduce_sum(&bad), Err(Error::ShapeMismatch { op: "all_reduce_sum", .. })));
    let none: Vec<Tensor<Dyn>> = Vec::new();
    assert!(all_reduce_sum(&none).is_err());
    Ok(())
}

#[test]
fn all_gather_concatenates_on_every_device() -> locus::Result<()> {
    let ids = all();
    let parts = per_device(&ids, |v| v as f32)?;
    let expect = gather(&parts, Cpu)?.to_vec()?;
    let everywhere = all_gather(&parts)?;
    for (t, &id) in everywhere.iter().zip(&ids) {
        assert_eq!(t.device(), id);
        assert_eq!(t.shape(), &[4 * ids.len(), 2]);
        assert_eq!(t.to_vec()?, expect);
    }
    // Uneven row counts.
    let uneven = scatter(&batch(7), &ids)?;
    for t in all_gather(&uneven)? {
        assert_eq!(t.to_vec()?, batch(7).to_vec()?);
    }
    let bad = vec![parts[0].clone(), Tensor::<Cpu>::ones([4, 3])?.into_dyn()];
    assert!(matches!(all_gather(&bad), Err(Error::ShapeMismatch { .. })));
    Ok(())
}

#[test]
fn peer_access_tokens_run_ops_across_two_gpus() -> locus::Result<()> {
    let count = locus::device_count()?;
    let same = can_access_peer::<Cuda<0>, Cuda<0>>().unwrap_err();
    assert!(matches!(same, Error::InvalidArgument { op: "can_access_peer", .. }), "{same}");
    assert!(same.to_string().contains("cuda:0 and cuda:0 are the same device"), "{same}");
    let same = enable_peer_access::<Cuda<1>, Cuda<1>>().unwrap_err();
    if count >= 2 {
        assert!(matches!(same, Error::InvalidArgument { op: "enable_peer_access", .. }), "{same}");
    } else {
        assert_eq!(same, Error::NoSuchDevice { ordinal: 1, count });
    }
    assert_eq!(enable_peer_access::<Cuda<0>, Cuda<99>>().unwrap_err(), Error::NoSuchDevice { ordinal: 99, count });
    if count < 2 {
        assert_eq!(can_access_peer::<Cuda<0>, Cuda<1>>().unwrap_err(), Error::NoSuchDevice { ordinal: 1, count });
    }
    if !locus::testing::needs_devices_for(2, "peer access between two GPUs")? {
        return Ok(());
    }
    let can = can_access_peer::<Cuda<0>, Cuda<1>>()?;
    if on_host() {
        assert!(can, "distinct simulated devices can always reach each other");
    }
    let peer = match enable_peer_access::<Cuda<0>, Cuda<1>>() {
        Ok(peer) => peer,
        Err(e @ Error::NoPeerAccess { .. }) if !can => {
            eprintln!("skipped: the peer ops ({e})");
            return Ok(());
        }
        Err(e) => return Err(e),
    };
    // Enabling twice is fine.
    enable_peer_access::<Cuda<1>, Cuda<0>>()?;
    let a = Tensor::<Cuda<0>>::from_vec(vec![1.0, 2.0, 3.0, 4.0], [2, 2])?;
    let b = Tensor::<Cuda<1>>::from_vec(vec![2.0, 2.0, 0.5, 1.0], [2, 2])?;
    assert_eq!(peer.add(&a, &b)?.to_vec()?, vec![3.0, 4.0, 3.5, 5.0]);
    assert_eq!(peer.sub(&a, &b)?.to_vec()?, vec![-1.0, 0.0, 2.5, 3.0]);
    assert_eq!(peer.mul(&a, &b)?.to_vec()?, vec![2.0, 4.0, 1.5, 4.0]);
    assert_eq!(peer.div(&a, &b)?.to_vec()?, vec![0.5, 1.0, 6.0, 4.0]);
    assert_eq!(peer.matmul(&a, &b)?.to_vec()?, vec![3.0, 4.0, 8.0, 10.0]);
    let c: Tensor<Cuda<0>> = peer.copy(&b)?;
    assert_eq!(c.to_vec()?, b.to_vec()?);
    let back: Tensor<Cuda<1>> = peer.reverse().add(&b, &a)?;
    assert_eq!(back.to_vec()?, vec![3.0, 4.0, 3.5, 5.0]);
    let wrong = Tensor::<Cuda<1>>::ones([3])?;
    assert!(matches!(peer.add(&a, &wrong), Err(Error::ShapeMismatch { .. })));
    Ok(())
}

#[derive(ToDevice)]
struct Mlp<D: Device> {
    w1: Tensor<D>,
    b1: Tensor<D>,
    w2: Tensor<D>,
    b2: Tensor<D>,
}

impl<D: Device> Module<D> for Mlp<D> {
    fn forward(&self, x: &Tensor<D>) -> locus::Result<Tensor<D>> {
        let h = (x.matmul(&self.w1)? + &self.b1)?.relu()?;
        h.matmul(&self.w2)? + &self.b2
    }
}

fn mlp() -> locus::Result<Mlp<Cuda<0>>> {
    let centred = |t: Tensor<Cuda<0>>| &t - 0.5;
    Ok(Mlp {
        w1: centred(Tensor::rand([6, 16], 1)?)?,
        b1: centred(Tensor::rand([16], 2)?)?,
        w2: centred(Tensor::rand([16, 3], 3)?)?,
        b2: centred(Tensor::rand([3], 4)?)?,
    })
}

// DataParallel tests look for live replica threads: they run one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// Waits (up to a second) for every replica thread to vanish from /proc: a joined
/// thread has finished, but the kernel may list its task for a moment longer.
fn replica_threads_after_join() -> usize {
    let deadline = std::time::Instant::now() + Duration::from_secs(1);
    loop {
        let n = replica_threads();
        if n == 0 || std::time::Instant::now() > deadline {
            return n;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Threads of this process whose name says they are replicas (Linux; none elsewhere).
fn replica_threads() -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0 };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("locus-replica"))
        .count()
}

#[test]
fn data_parallel_output_equals_single_device_output() -> locus::Result<()> {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let ids = all();
    let dp = DataParallel::new(mlp()?, &ids, Cuda::<0>)?;
    let model = dp.module();
    assert_eq!(dp.devices(), ids);
    assert_eq!(dp.replicas()?.len(), ids.len());
    for rows in [1, 2, 3, 7, 64, 101] {
        let x = Tensor::<Cpu>::rand([rows, 6], rows as u64)?;
        let y: Tensor<Cuda<0>> = dp.forward(&x)?;
        let single = model.forward(&x.to::<Cuda<0>>()?)?;
        assert_eq!(y.shape(), &[rows, 3]);
        let (got, want) = (y.to_vec()?, single.to_vec()?);
        if on_host() {
            // Rows are independent and summed in the same order: bit for bit equal.
            assert_eq!(got, want, "{rows} rows");
        } else {
            let diff = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(diff <= 1e-4, "{rows} rows: max difference {diff}");
        }
    }
    // Output on the host, input already on a device, a one-device list.
    let dp_cpu = DataParallel::new(mlp()?, &ids[..1], Cpu)?;
    let x = Tensor::<Cuda<0>>::rand([5, 6], 8)?;
    assert_eq!(dp_cpu.forward(&x)?.to_vec()?, model.forward(&x)?.to_vec()?);
    assert_eq!(replica_threads_after_join(), 0);
    Ok(())
}

#[test]
fn data_parallel_rejects_bad_input() -> locus::Result<()> {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    assert!(DataParallel::new(mlp()?, &[], Cpu).is_err());
    assert!(DataParallel::new(mlp()?, &[DeviceId::Cuda(0), DeviceId::Cuda(0)], Cpu).is_err());
    let count = locus::device_count()?;
    assert_eq!(
        DataParallel::new(mlp()?, &[DeviceId::Cuda(0), DeviceId::Cuda(42)], Cpu).err(),
        Some(Error::NoSuchDevice { ordinal: 42, count })
    );
    let dp = DataParallel::new(mlp()?, &all(), Cpu)?;
    assert!(matches!(dp.forward(&Tensor::<Cpu>::full([], 1.0)?), Err(Error::InvalidArgument { .. })));
    // Wrong feature count: the first replica's matmul fails, and says where.
    match dp.forward(&Tensor::<Cpu>::ones([4, 5])?) {
        Err(Error::Replica { device, source }) => {
            assert_eq!(device, DeviceId::Cuda(0));
            assert!(matches!(*source, Error::ShapeMismatch { op: "matmul", .. }), "{source}");
        }
        other => panic!("expected a replica error, got {other:?}"),
    }
    assert_eq!(replica_threads_after_join(), 0);
    Ok(())
}

/// A module that fails (or panics) on one device and is slow everywhere else, counting
/// the forwards in flight.
#[derive(ToDevice)]
struct Faulty<D: Device> {
    scale: Tensor<D>,
    fail_on: DeviceId,
    panic: bool,
    in_flight: Arc<AtomicUsize>,
    finished: Arc<AtomicUsize>,
    /// The most replica threads a forward saw alive: shows that `replica_threads` sees them.
    seen_threads: Arc<AtomicUsize>,
}

struct Leave<'a>(&'a AtomicUsize);

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<D: Device> Module<D> for Faulty<D> {
    fn forward(&self, x: &Tensor<D>) -> locus::Result<Tensor<D>> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let _leave = Leave(&self.in_flight);
        self.seen_threads.fetch_max(replica_threads(), Ordering::SeqCst);
        if x.device() == self.fail_on {
            if self.panic {
                panic!("injected panic on {}", x.device());
            }
            return Err(Error::InvalidArgument { op: "forward", reason: "injected failure".into() });
        }
        std::thread::sleep(Duration::from_millis(50));
        let y = (x * &self.scale)?;
        self.finished.fetch_add(1, Ordering::SeqCst);
        Ok(y)
    }
}

fn faulty(panic: bool) -> locus::Result<Faulty<Cpu>> {
    faulty_on(*all().last().unwrap(), panic)
}

/// [`Faulty`] failing (or panicking) on `fail_on`.
fn faulty_on(fail_on: DeviceId, panic: bool) -> locus::Result<Faulty<Cpu>> {
    Ok(Faulty {
        scale: Tensor::full([1], 2.0)?,
        fail_on,
        panic,
        in_flight: Arc::new(AtomicUsize::new(0)),
        finished: Arc::new(AtomicUsize::new(0)),
        seen_threads: Arc::new(AtomicUsize::new(0)),
    })
}

#[test]
fn a_replica_that_errors_gives_err_naming_its_device_and_leaves_no_thread() -> locus::Result<()> {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let ids = all();
    let dp = DataParallel::new(faulty(false)?, &ids, Cpu)?;
    let model = dp.module();
    let err = dp.forward(&Tensor::<Cpu>::ones([4 * ids.len(), 2])?).unwrap_err();
    assert_eq!(
        err,
        Error::Replica {
            device: model.fail_on,
            source: Box::new(Error::InvalidArgument { op: "forward", reason: "injected failure".into() }),
        }
    );
    assert!(err.to_string().starts_with(&format!("replica on {} failed: ", model.fail_on)), "{err}");
    // The slow replicas on the other devices ran to the end before forward returned.
    assert_eq!(model.in_flight.load(Ordering::SeqCst), 0);
    assert_eq!(model.finished.load(Ordering::SeqCst), ids.len() - 1);
    if ids.len() >= 2 && std::path::Path::new("/proc/self/task").exists() {
        // The probe below does see replica threads while they run (a single replica
        // runs on the calling thread, as in torch.nn.DataParallel).
        assert!(model.seen_threads.load(Ordering::SeqCst) >= 1);
    }
    assert_eq!(replica_threads_after_join(), 0);
    // The same DataParallel still works on a batch the faulty device does not get.
    if ids.len() >= 2 {
        let y = dp.forward(&Tensor::<Cpu>::ones([1, 2])?)?;
        assert_eq!(y.to_vec()?, vec![2.0, 2.0]);
    }
    Ok(())
}

#[test]
fn a_panicking_replica_gives_err_too() -> locus::Result<()> {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let ids = all();
    let dp = DataParallel::new(faulty(true)?, &ids, Cpu)?;
    let model = dp.module();
    match dp.forward(&Tensor::<Cpu>::ones([2 * ids.len(), 2])?) {
        Err(Error::Replica { device, source }) => {
            assert_eq!(device, model.fail_on);
            let Error::Panicked { message } = *source else { panic!("expected a panic, got {source}") };
            assert_eq!(message, format!("injected panic on {}", model.fail_on));
        }
        other => panic!("expected a replica error, got {other:?}"),
    }
    assert_eq!(model.in_flight.load(Ordering::SeqCst), 0);
    assert_eq!(model.finished.load(Ordering::SeqCst), ids.len() - 1);
    assert_eq!(replica_threads_after_join(), 0);
    Ok(())
}

/// The first replica runs on the calling thread: its panic is its error too, and the
/// other replicas, on their own threads, still run to the end before `forward` returns.
#[test]
fn a_panicking_first_replica_gives_err_after_the_others_finish() -> locus::Result<()> {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let ids = all();
    let dp = DataParallel::new(faulty_on(ids[0], true)?, &ids, Cpu)?;
    let model = dp.module();
    match dp.forward(&Tensor::<Cpu>::ones([2 * ids.len(), 2])?) {
        Err(Error::Replica { device, source }) => {
            assert_eq!(device, ids[0]);
            let Error::Panicked { message } = *source else { panic!("expected a panic, got {source}") };
            assert_eq!(message, format!("injected panic on {}", ids[0]));
        }
        other => panic!("expected a replica error, got {other:?}"),
    }
    assert_eq!(model.in_flight.load(Ordering::SeqCst), 0);
    assert_eq!(model.finished.load(Ordering::SeqCst), ids.len() - 1);
    assert_eq!(replica_threads_after_join(), 0);
    Ok(())
}

/// `x @ w + b`, trained below by plain SGD with hand-written gradients.
#[derive(ToDevice)]
struct Linear<D: Device> {
    w: Tensor<D>,
    b: Tensor<D>,
}

impl<D: Device> Module<D> for Linear<D> {
    fn forward(&self, x: &Tensor<D>) -> locus::Result<Tensor<D>> {
        x.matmul(&self.w)? + &self.b
    }
}

fn linear() -> locus::Result<Linear<Cuda<0>>> {
    Ok(Linear { w: (Tensor::rand([4, 2], 21)? - 0.5f32)?, b: Tensor::zeros([2])? })
}

/// The mean squared error of `y` against `target`, and its gradient in `y`.
fn mse(y: &Tensor<Cuda<0>>, target: &Tensor<Cuda<0>>) -> locus::Result<(f32, Tensor<Cuda<0>>)> {
    let diff = (y - target)?;
    let loss = (&diff * &diff)?.mean()?.to_vec()?[0];
    let grad = (&diff * (2.0 / diff.numel() as f32))?;
    Ok((loss, grad))
}

/// One SGD step of `model` on the batch `x`, given the loss's gradient in the output.
fn sgd_step(model: &mut Linear<Cuda<0>>, x: &Tensor<Cuda<0>>, grad_y: &Tensor<Cuda<0>>) -> locus::Result<()> {
    const LR: f32 = 0.5;
    let grad_w = x.t()?.matmul(grad_y)?;
    let grad_b = grad_y.sum_dim(0, false)?;
    model.w = (&model.w - (grad_w * LR)?)?;
    model.b = (&model.b - (grad_b * LR)?)?;
    Ok(())
}

#[test]
fn data_parallel_trains_like_one_device_step_by_step() -> locus::Result<()> {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // Three devices where there are three (LOCUS_HOST_DEVICES=3), else two.
    let ids: Vec<DeviceId> = all().into_iter().take(3).collect();
    if !locus::testing::needs_devices_for(2, "DataParallel training")? {
        return Ok(());
    }
    let x = Tensor::<Cuda<0>>::rand([9, 4], 22)?;
    let target = (x.matmul(&Tensor::<Cuda<0>>::rand([4, 2], 23)?)? + 1.0)?;

    let mut single = linear()?;
    // Built once before the loop, as with torch's nn.DataParallel.
    let mut dp = DataParallel::new(linear()?, &ids, Cuda::<0>)?;
    let (mut got, mut want) = (Vec::new(), Vec::new());
    for _ in 0..5 {
        let (loss, grad) = mse(&single.forward(&x)?, &target)?;
        sgd_step(&mut single, &x, &grad)?;
        want.push(loss);
        let (loss, grad) = mse(&dp.forward(&x)?, &target)?;
        sgd_step(dp.module_mut(), &x, &grad)?;
        got.push(loss);
    }
    // The reference learns, so a stale replica shows.
    assert!(want[4] < 0.5 * want[0], "one device: losses {want:?}");
    for (step, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!((g - w).abs() <= 1e-5 * w.abs(), "step {step}: DataParallel losses {got:?}, one device {want:?}");
    }
    assert_eq!(replica_threads_after_join(), 0);
    Ok(())
}

#[test]
fn in_place_writes_to_the_module_reach_the_replicas() -> locus::Result<()> {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let ids = all();
    let model = Linear { w: Tensor::<Cpu>::zeros([4, 2])?, b: Tensor::zeros([2])? };
    let mut dp = DataParallel::new(model, &ids, Cpu)?;
    let x = Tensor::<Cpu>::ones([2 * ids.len(), 4])?;
    assert_eq!(dp.forward(&x)?.to_vec()?, vec![0.0; 4 * ids.len()]);
    // The module holds the only handle to `b` on the host: the write is in place.
    dp.module_mut().b.as_mut_slice()?[1] = 7.0;
    assert_eq!(dp.forward(&x)?.to_vec()?, [0.0, 7.0].repeat(2 * ids.len()));
    assert_eq!(dp.into_inner().b.to_vec()?, vec![0.0, 7.0]);
    Ok(())
}
