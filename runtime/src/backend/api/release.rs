//! How memory made outside locus goes back to its owner.

/// What gives memory made outside locus back to its owner (a tensor made by
/// `Tensor::from_raw_parts`): run once, when the memory's last use is over. Dropped
/// without [`Release::leak`], it runs then.
pub(crate) struct Release(std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>);

impl Release {
    pub(crate) fn new(f: impl FnOnce() + Send + 'static) -> Self {
        Release(std::sync::Mutex::new(Some(Box::new(f))))
    }

    fn take(&mut self) -> Option<Box<dyn FnOnce() + Send>> {
        self.0.get_mut().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Gives the memory back now.
    pub(crate) fn run(mut self) {
        if let Some(f) = self.take() {
            f();
        }
    }

    /// Never gives the memory back: for memory whose last use cannot be observed, which
    /// must not be handed to its owner to reuse.
    pub(crate) fn leak(mut self) {
        std::mem::forget(self.take());
    }
}

impl Drop for Release {
    fn drop(&mut self) {
        if let Some(f) = self.take() {
            f();
        }
    }
}

impl std::fmt::Debug for Release {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Release")
    }
}
