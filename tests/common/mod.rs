//! Helpers shared by the integration tests that check stream ordering.

#![allow(dead_code)]

pub mod ranks;

use locus::{backend_name, Cuda, Tensor};

/// Whether the tests run on a real GPU.
pub fn on_gpu() -> bool {
    backend_name().map(|b| b == "cuda").unwrap_or(false)
}

/// Queues a long chain of matmuls on the current stream of `Cuda<0>` (about 30 ms on an
/// H200; a little work on the host backend, whose stream workers run it behind the host
/// just the same) and returns without waiting: whatever is queued next on that stream
/// runs only after it.
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
