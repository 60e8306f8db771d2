//! Memory statistics of `Dyn` tensors on every device rising and falling.
//!
//! One test in its own binary: no other test allocates while it counts bytes.

use locus::{DeviceId, Dyn, Tensor};

#[test]
fn memory_stats_rise_and_fall_on_every_device() -> locus::Result<()> {
    let mut all = locus::devices()?;
    all.push(DeviceId::Pinned);
    for dev in all {
        locus::reset_peak_memory_stats(dev)?;
        let before = locus::memory_allocated(dev)?;
        assert_eq!(locus::max_memory_allocated(dev)?, before, "{dev}");
        let a = Tensor::<Dyn, f64>::zeros_on(Dyn::new(dev), [512])?;
        let b = a.to_dyn(dev)?;
        // Same device: `to_dyn` shares the storage rather than copying.
        assert_eq!(locus::memory_allocated(dev)?, before + 4096, "{dev}");
        let c = (&a + &b)?;
        assert_eq!(locus::memory_allocated(dev)?, before + 8192, "{dev}");
        drop((a, b));
        assert_eq!(locus::memory_allocated(dev)?, before + 4096, "{dev}");
        drop(c);
        assert_eq!(locus::memory_allocated(dev)?, before, "{dev}");
        assert_eq!(locus::max_memory_allocated(dev)?, before + 8192, "{dev}");
        locus::reset_peak_memory_stats(dev)?;
        assert_eq!(locus::max_memory_allocated(dev)?, before, "{dev}");
    }
    let err = locus::memory_allocated(DeviceId::Cuda(4096)).unwrap_err();
    assert!(matches!(err, locus::Error::NoSuchDevice { ordinal: 4096, .. }));
    Ok(())
}
