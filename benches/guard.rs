//! The cost of the current-device guard: entering and leaving the device that is
//! already current (no backend call), and switching between two devices (a backend
//! `make_current` each way; a context switch on the cuda backend).
//!
//!     cargo bench --bench guard
//!
//! Prints nanoseconds per enter + exit. PyTorch's figure for the switch comes from
//! `with torch.cuda.device(i):` in a loop on the same machine.

use std::hint::black_box;
use std::time::Instant;

use locus::{DeviceGuard, DeviceId};

const ROUNDS: u32 = 2_000_000;

fn per_op(label: &str, mut f: impl FnMut()) {
    for _ in 0..ROUNDS / 10 {
        f();
    }
    let start = Instant::now();
    for _ in 0..ROUNDS {
        f();
    }
    let ns = start.elapsed().as_nanos() as f64 / f64::from(ROUNDS);
    println!("{label:<40} {ns:>8.1} ns per enter + exit");
}

fn main() -> locus::Result<()> {
    println!("backend: {} ({} devices)", locus::backend_name()?, locus::device_count()?);
    let _outer = DeviceGuard::enter(DeviceId::Cuda(0))?;
    per_op("same device (cuda:0 inside cuda:0)", || {
        let g = DeviceGuard::enter(black_box(DeviceId::Cuda(0))).unwrap();
        black_box(&g);
    });
    let other = if locus::device_count()? >= 2 { DeviceId::Cuda(1) } else { DeviceId::Cpu };
    per_op(&format!("switch (cuda:0 -> {other} -> cuda:0)"), || {
        let g = DeviceGuard::enter(black_box(other)).unwrap();
        black_box(&g);
    });
    Ok(())
}
