//! How much pinned memory the Loader holds ahead of its consumer: at most `prefetch`
//! waiting batches plus one per worker, however slow one batch is.
//!
//! Its own test binary with one test: the pinned pool's counters are process-wide, so
//! no other test may pin memory while this one measures.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use locus::{pinned_stats, Cuda, Loader};

/// f32 elements in one sample: 4 KiB, the pool's smallest block, so a batch of one
/// sample is exactly one block.
const SAMPLE: usize = 1024;
const BLOCK: usize = SAMPLE * 4;

/// 10 000 samples, each filled with its index; sample 0 takes 300 ms, the others none.
/// Every `get` runs while its batch is pinned, and records the pool's bytes in use.
struct SlowFirst {
    peak: Arc<AtomicUsize>,
}

impl locus::Dataset for SlowFirst {
    type Elem = f32;
    fn len(&self) -> usize {
        10_000
    }
    fn sample_shape(&self) -> Vec<usize> {
        vec![SAMPLE]
    }
    fn get(&self, index: usize, out: &mut [f32]) -> locus::Result<()> {
        if index == 0 {
            std::thread::sleep(Duration::from_millis(300));
        }
        out.fill(index as f32);
        self.peak.fetch_max(pinned_stats().bytes_in_use, Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn a_slow_batch_does_not_let_workers_pin_beyond_prefetch_plus_one_per_worker() -> locus::Result<()> {
    // The test reads batches back with `to_vec`, whose inline path stages through a block
    // of the same pinned pool: downloads go direct here, so the pool counts the Loader's
    // blocks alone.
    locus::tuning::set_download_paths(usize::MAX, usize::MAX);
    let (prefetch, workers) = (1, 2);
    let bound = (prefetch + workers) * BLOCK;
    let base = pinned_stats().bytes_in_use;
    let peak = Arc::new(AtomicUsize::new(0));
    let mut loader = Loader::from_dataset(SlowFirst { peak: Arc::clone(&peak) }, 1, None)?
        .prefetch(prefetch)
        .workers(workers)
        .to::<Cuda<0>>()?;
    let first = loader.next().expect("batch 0")?;
    assert_eq!(first.to_vec()?[0], 0.0);
    let after_first = pinned_stats().bytes_in_use.max(peak.load(Ordering::SeqCst)) - base;
    assert!(
        after_first <= bound,
        "after the first batch {after_first} bytes are pinned: {} batches, more than prefetch {prefetch} + {workers} workers",
        after_first / BLOCK
    );
    let mut count = 1;
    for (i, batch) in loader.enumerate() {
        assert_eq!(batch?.to_vec()?[SAMPLE - 1], (i + 1) as f32, "batches stay in order");
        count += 1;
    }
    assert_eq!(count, 10_000);
    let overall = peak.load(Ordering::SeqCst) - base;
    assert!(overall <= bound, "{overall} bytes pinned at the peak: {} batches", overall / BLOCK);
    Ok(())
}
