//! Helpers shared by the integration tests that check stream ordering.

#![allow(dead_code)]

use locus::{backend_name, Cuda, Tensor};

/// Whether the tests run on a real GPU.
pub fn on_gpu() -> bool {
    backend_name().map(|b| b == "cuda").unwrap_or(false)
}

/// Says, once per test, that the race it checks cannot happen on the host backend
/// (which runs every stream op at once), so only the GPU run can catch it.
pub fn note_host(test: &str) {
    if !on_gpu() {
        eprintln!(
            "{test}: the host backend runs stream work at once, so this race cannot happen here; the GPU run checks it"
        );
    }
}

/// Queues a long chain of matmuls on the current stream of `Cuda<0>` (about 30 ms on an
/// H200; a little work on the host backend) and returns without waiting: whatever is
/// queued next on that stream runs only after it.
pub fn keep_busy() -> locus::Result<()> {
    let n = if on_gpu() { 4096 } else { 32 };
    let m = Tensor::<Cuda<0>>::full([n, n], 1.0 / n as f32)?;
    let mut acc = m.clone();
    for _ in 0..12 {
        acc = acc.matmul(&m)?;
    }
    drop(acc);
    Ok(())
}
