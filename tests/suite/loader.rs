//! The pinning, prefetching Loader: order, completeness, shuffling, worker failures and
//! shutdown.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use locus::{Cpu, Cuda, Error, Loader, Tensor};

type G = Cuda<0>;

fn rows(n: usize) -> Tensor<Cpu, i32> {
    Tensor::<Cpu, i32>::arange(0, (n * 3) as i32, 1).unwrap().reshape([n, 3]).unwrap()
}

#[test]
fn dataset_batches_come_in_order_with_none_lost_or_duplicated() -> locus::Result<()> {
    let loader = Loader::from_dataset(rows(103), 10, None)?.workers(3).prefetch(4).to::<G>()?;
    let mut seen = Vec::new();
    for (i, batch) in loader.enumerate() {
        let batch = batch?;
        assert_eq!(batch.device(), locus::DeviceId::Cuda(0));
        assert_eq!(batch.shape(), &[if i < 10 { 10 } else { 3 }, 3]);
        seen.extend(batch.to_vec()?);
    }
    assert_eq!(seen, (0..309).collect::<Vec<i32>>());
    Ok(())
}

#[test]
fn shuffling_is_a_seeded_permutation() -> locus::Result<()> {
    let firsts = |seed| -> locus::Result<Vec<i32>> {
        let loader = Loader::from_dataset(rows(50), 7, Some(seed))?.to::<G>()?;
        let mut out = Vec::new();
        for b in loader {
            out.extend(b?.to_vec()?.chunks(3).map(|r| r[0] / 3));
        }
        Ok(out)
    };
    let a = firsts(1)?;
    assert_eq!(a, firsts(1)?, "same seed, same order");
    assert_ne!(a, firsts(2)?);
    assert_ne!(a, (0..50).collect::<Vec<_>>());
    let mut sorted = a.clone();
    sorted.sort();
    assert_eq!(sorted, (0..50).collect::<Vec<_>>(), "every sample exactly once");
    Ok(())
}

#[test]
fn iterator_batches_keep_their_order_across_workers() -> locus::Result<()> {
    let batches = (0..40).map(|i| Tensor::<Cpu>::full([1000], i as f32));
    let loader = Loader::from_batches(batches).workers(4).prefetch(3).to::<G>()?;
    let got: Vec<f32> = loader.map(|b| Ok(b?.to_vec()?[999])).collect::<locus::Result<_>>()?;
    assert_eq!(got, (0..40).map(|i| i as f32).collect::<Vec<_>>());
    Ok(())
}

#[test]
fn a_failing_batch_is_an_error_at_its_index_then_the_end() -> locus::Result<()> {
    let batches = (0..10).map(|i| {
        if i == 4 {
            Err(Error::InvalidArgument { op: "read", reason: "corrupt record".into() })
        } else {
            Tensor::<Cpu>::full([8], i as f32)
        }
    });
    let mut loader = Loader::from_batches(batches).workers(2).to::<G>()?;
    for i in 0..4 {
        assert_eq!(loader.next().unwrap()?.to_vec()?[0], i as f32);
    }
    match loader.next() {
        Some(Err(Error::LoaderWorker { batch: 4, message })) => {
            assert!(message.contains("corrupt record"), "{message}")
        }
        other => panic!("expected the error of batch 4, got {other:?}"),
    }
    assert!(loader.next().is_none());
    Ok(())
}

#[test]
fn a_panicking_worker_is_an_error_not_a_hang() -> locus::Result<()> {
    struct Samples;
    impl locus::Dataset for Samples {
        type Elem = f32;
        fn len(&self) -> usize {
            20
        }
        fn sample_shape(&self) -> Vec<usize> {
            vec![2]
        }
        fn get(&self, index: usize, out: &mut [f32]) -> locus::Result<()> {
            if index == 13 {
                panic!("sample 13 is cursed");
            }
            out.fill(index as f32);
            Ok(())
        }
    }
    let loader = Loader::from_dataset(Samples, 4, None)?.workers(3).to::<G>()?;
    let results: Vec<_> = loader.collect();
    assert_eq!(results.len(), 4, "batches 0..=2, then the failure of batch 3");
    assert!(results[..3].iter().all(|r| r.is_ok()));
    match &results[3] {
        Err(Error::LoaderWorker { batch: 3, message }) => assert!(message.contains("cursed"), "{message}"),
        other => panic!("expected the panic of batch 3, got {other:?}"),
    }
    Ok(())
}

#[test]
fn dropping_the_loader_stops_and_joins_its_threads() -> locus::Result<()> {
    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let released = Arc::new(AtomicBool::new(false));
    let made = Arc::new(AtomicUsize::new(0));
    let (flag, count) = (Flag(Arc::clone(&released)), Arc::clone(&made));
    // An endless source: only stopping the workers ends it.
    let endless = std::iter::repeat_with(move || {
        let _keep = &flag;
        count.fetch_add(1, Ordering::SeqCst);
        Tensor::<Cpu>::ones([16])
    });
    let mut loader = Loader::from_batches(endless).workers(2).prefetch(2).to::<G>()?;
    for _ in 0..3 {
        loader.next().unwrap()?;
    }
    drop(loader);
    // Workers held the source; it is released only when every thread has exited.
    assert!(released.load(Ordering::SeqCst), "all worker threads joined");
    let after = made.load(Ordering::SeqCst);
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(made.load(Ordering::SeqCst), after, "nothing runs after drop");
    Ok(())
}

#[test]
fn dropping_the_loader_while_workers_wait_for_room_returns_at_once() -> locus::Result<()> {
    /// Sample 0 is slow, so the other workers run ahead and fill what they may.
    struct SlowFirst(Arc<AtomicUsize>);
    impl locus::Dataset for SlowFirst {
        type Elem = f32;
        fn len(&self) -> usize {
            1000
        }
        fn sample_shape(&self) -> Vec<usize> {
            vec![4]
        }
        fn get(&self, index: usize, out: &mut [f32]) -> locus::Result<()> {
            if index == 0 {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            self.0.fetch_add(1, Ordering::SeqCst);
            out.fill(index as f32);
            Ok(())
        }
    }
    let made = Arc::new(AtomicUsize::new(0));
    let mut loader = Loader::from_dataset(SlowFirst(Arc::clone(&made)), 1, None)?.workers(3).prefetch(1).to::<G>()?;
    assert_eq!(loader.next().unwrap()?.to_vec()?, vec![0.0; 4]);
    std::thread::sleep(std::time::Duration::from_millis(50));
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        drop(loader);
        let _ = tx.send(());
    });
    rx.recv_timeout(std::time::Duration::from_secs(5)).expect("dropping the loader returns, not hangs");
    let after = made.load(Ordering::SeqCst);
    // Batch 0 handed out and batch 1 on its way to the device, then prefetch 1 + 3 workers.
    assert!(after <= 2 + 1 + 3, "workers ran {after} samples ahead of a consumer that took one batch");
    std::thread::sleep(std::time::Duration::from_millis(20));
    assert_eq!(made.load(Ordering::SeqCst), after, "nothing runs after drop");
    Ok(())
}

#[test]
fn bad_configurations_are_errors() {
    assert!(matches!(Loader::from_dataset(rows(4), 0, None), Err(Error::InvalidArgument { .. })));
    assert!(matches!(
        Loader::from_dataset(rows(4), 2, None).unwrap().to::<Cpu>(),
        Err(Error::InvalidArgument { op: "Loader", .. })
    ));
    assert!(matches!(Loader::from_dataset(rows(4), 2, None).unwrap().to::<Cuda<9>>(), Err(Error::NoSuchDevice { .. })));
    let empty = Loader::from_dataset(rows(0), 3, None).unwrap().to::<G>().unwrap();
    assert_eq!(empty.count(), 0);
}

/// Inputs whose row `r` is `[3r, 3r + 1, 3r + 2]`, and the target `r` of each.
fn pairs(inputs: usize, targets: usize) -> (Tensor<Cpu>, Tensor<Cpu, i32>) {
    let x = Tensor::<Cpu>::arange(0.0, (inputs * 3) as f32, 1.0).unwrap().reshape([inputs, 3]).unwrap();
    (x, Tensor::<Cpu, i32>::arange(0, targets as i32, 1).unwrap())
}

#[test]
fn pair_batches_keep_inputs_and_targets_in_lockstep_on_the_device() -> locus::Result<()> {
    let (x, y) = pairs(50, 50);
    let loader = Loader::from_pairs(x, y, 8, Some(3))?.workers(3).to::<G>()?;
    let mut targets = Vec::new();
    for (i, batch) in loader.enumerate() {
        let (input, target): (Tensor<G>, Tensor<G, i32>) = batch?;
        assert_eq!((input.device(), target.device()), (locus::DeviceId::Cuda(0), locus::DeviceId::Cuda(0)));
        let rows = if i < 6 { 8 } else { 2 };
        assert_eq!((input.shape(), target.shape()), (&[rows, 3][..], &[rows][..]));
        let (input, target) = (input.to_vec()?, target.to_vec()?);
        for (row, &t) in input.chunks(3).zip(&target) {
            assert_eq!(row, [3 * t, 3 * t + 1, 3 * t + 2].map(|v| v as f32), "the input of target {t}");
        }
        targets.extend(target);
    }
    assert_ne!(targets, (0..50).collect::<Vec<_>>(), "shuffled");
    targets.sort();
    assert_eq!(targets, (0..50).collect::<Vec<_>>(), "every pair exactly once");
    Ok(())
}

#[test]
fn pairs_of_different_lengths_are_an_error_naming_both() {
    let (x, y) = pairs(5, 4);
    match Loader::from_pairs(x, y, 2, None) {
        Err(e @ Error::InvalidArgument { op: "Loader::from_pairs", .. }) => {
            let message = e.to_string();
            assert!(message.contains("inputs have 5") && message.contains("targets have 4"), "{message}");
        }
        Err(e) => panic!("expected the mismatch of 5 inputs and 4 targets, got {e}"),
        Ok(_) => panic!("expected the mismatch of 5 inputs and 4 targets, got a loader"),
    }
}

#[test]
fn a_failing_target_is_an_error_at_its_batch() -> locus::Result<()> {
    struct Labels;
    impl locus::Dataset for Labels {
        type Elem = i32;
        fn len(&self) -> usize {
            20
        }
        fn sample_shape(&self) -> Vec<usize> {
            vec![]
        }
        fn get(&self, index: usize, out: &mut [i32]) -> locus::Result<()> {
            if index == 13 {
                return Err(Error::InvalidArgument { op: "label", reason: "label 13 is missing".into() });
            }
            out[0] = index as i32;
            Ok(())
        }
    }
    let results: Vec<_> = Loader::from_pairs(pairs(20, 0).0, Labels, 4, None)?.workers(2).to::<G>()?.collect();
    assert_eq!(results.len(), 4, "batches 0..=2, then the failure of batch 3");
    assert!(results[..3].iter().all(|r| r.is_ok()));
    match &results[3] {
        Err(Error::LoaderWorker { batch: 3, message }) => assert!(message.contains("label 13"), "{message}"),
        other => panic!("expected the error of batch 3, got {other:?}"),
    }
    Ok(())
}

#[test]
fn epochs_share_one_dataset_and_reshuffle_it_by_seed() -> locus::Result<()> {
    let data = Arc::new(rows(50));
    let order = |seed, epoch| -> locus::Result<Vec<i32>> {
        let loader = Loader::from_dataset(Arc::clone(&data), 7, Some(seed))?.epoch(epoch).to::<G>()?;
        assert_eq!(Arc::strong_count(&data), 2, "the loader holds the dataset, not a copy");
        let mut out = Vec::new();
        for b in loader {
            out.extend(b?.to_vec()?.chunks(3).map(|r| r[0] / 3));
        }
        Ok(out)
    };
    let (first, second) = (order(5, 0)?, order(5, 1)?);
    assert_eq!(Arc::strong_count(&data), 1, "each finished loader lets the dataset go");
    assert_ne!(first, second, "a new epoch, a new order");
    assert_eq!(second, order(5, 1)?, "same seed and epoch, same order");
    for epoch in [&first, &second] {
        let mut sorted = epoch.clone();
        sorted.sort();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>(), "every sample exactly once per epoch");
    }
    // Epoch 0 is the seed's own order; a shared `dyn Dataset` loads the same.
    let shared: Arc<dyn locus::Dataset<Elem = i32>> = data.clone();
    let plain: Vec<i32> = Loader::from_dataset(shared, 7, Some(5))?
        .to::<G>()?
        .map(|b| Ok(b?.to_vec()?.chunks(3).map(|r| r[0] / 3).collect::<Vec<_>>()))
        .collect::<locus::Result<Vec<_>>>()?
        .concat();
    assert_eq!(plain, first);
    Ok(())
}
