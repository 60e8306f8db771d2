//! The one method every row follows, and the row format.
//!
//! A row is `warm()` untimed samples, then `reps()` timed samples, each taken the same
//! way; it prints the median, the min and the max of the timed samples, in the row's
//! unit. A sample is one run of the row's work: an event pair around GPU work, the wall
//! time of a host-visible operation, or the per-operation average over one batch of many
//! operations (the submit rates and the guard). `--quick` keeps the method but takes
//! fewer samples.
//!
//! Each line is `row  median  unit  note  min  max`, tab-separated; `n/a` where a row
//! cannot be measured here (the note says why).

use std::sync::atomic::{AtomicBool, Ordering};

static QUICK: AtomicBool = AtomicBool::new(false);

/// Switches to the quick method (fewer samples) for the rest of the run.
pub(crate) fn set_quick(quick: bool) {
    QUICK.store(quick, Ordering::Relaxed);
}

/// Whether the quick method is on.
pub(crate) fn quick() -> bool {
    QUICK.load(Ordering::Relaxed)
}

/// Untimed samples before the timed ones: 3 (1 with `--quick`).
pub(crate) fn warm() -> usize {
    if quick() {
        1
    } else {
        3
    }
}

/// Timed samples per row: 11, an odd count so that the median is one of them (5 with
/// `--quick`).
pub(crate) fn reps() -> usize {
    if quick() {
        5
    } else {
        11
    }
}

/// `warm()` untimed calls of `sample`, then the results of `reps()` timed ones.
pub(crate) fn samples(mut sample: impl FnMut() -> f64) -> Vec<f64> {
    for _ in 0..warm() {
        sample();
    }
    (0..reps()).map(|_| sample()).collect()
}

/// Median, min and max of `v`; the median of an even count is the upper middle value.
pub(crate) fn stats(v: &[f64]) -> (f64, f64, f64) {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// The median of `v`.
pub(crate) fn median(v: &[f64]) -> f64 {
    stats(v).0
}

/// GB/s for each sample of seconds, moving `bytes` bytes each.
pub(crate) fn gbs(bytes: f64, secs: &[f64]) -> Vec<f64> {
    secs.iter().map(|t| bytes / t / 1e9).collect()
}

/// Milliseconds for each sample of seconds.
pub(crate) fn ms(secs: &[f64]) -> Vec<f64> {
    secs.iter().map(|t| t * 1e3).collect()
}

/// Prints one row from its samples (already in `unit`).
pub(crate) fn row(name: &str, samples: &[f64], unit: &str, note: &str) {
    let (med, min, max) = stats(samples);
    println!("{name}\t{med:.3}\t{unit}\t{note}\t{min:.3}\t{max:.3}");
}

/// Prints a row that could not be measured here; `note` says why.
pub(crate) fn row_na(name: &str, unit: &str, note: &str) {
    println!("{name}\tn/a\t{unit}\t{note}\tn/a\tn/a");
}
