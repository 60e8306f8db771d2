//! A learning-rate schedule: linear warm-up, then a cosine decay to a floor (the
//! schedule of most transformer training recipes).

/// The learning rate at each step: from 0 up to `peak` over `warmup` steps, then down
/// to `floor` along half a cosine until `total`, then `floor`.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::optim::CosineWithWarmup;
/// let s = CosineWithWarmup { peak: 1e-3, floor: 1e-5, warmup: 10, total: 110 };
/// assert!((s.lr(0) - 1e-4).abs() < 1e-12);
/// assert!((s.lr(9) - 1e-3).abs() < 1e-12);
/// assert!((s.lr(60) - (1e-3 + 1e-5) / 2.0).abs() < 1e-9);
/// assert_eq!(s.lr(500), 1e-5);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CosineWithWarmup {
    /// The rate at the end of warm-up.
    pub peak: f64,
    /// The rate at the end.
    pub floor: f64,
    /// Steps of linear warm-up.
    pub warmup: u64,
    /// The step at which the decay reaches `floor`.
    pub total: u64,
}

impl CosineWithWarmup {
    /// The rate for step `step` (counted from 0).
    pub fn lr(&self, step: u64) -> f64 {
        if step < self.warmup {
            return self.peak * (step + 1) as f64 / self.warmup as f64;
        }
        if step >= self.total {
            return self.floor;
        }
        let span = (self.total - self.warmup).max(1) as f64;
        let progress = (step - self.warmup) as f64 / span;
        self.floor + (self.peak - self.floor) * 0.5 * (1.0 + (std::f64::consts::PI * progress).cos())
    }
}
