//! Placements at run time: device names, missing devices, copies between placements,
//! `Dyn` mismatches and memory accounting.

use locus::{Cpu, Cuda, DeviceId, Dyn, Error, Event, Pinned, Stream, Tensor};

#[test]
fn device_ids_print_and_parse() {
    for (s, id) in [
        ("cpu", DeviceId::Cpu),
        ("pinned", DeviceId::Pinned),
        ("cuda:0", DeviceId::Cuda(0)),
        ("cuda:12", DeviceId::Cuda(12)),
    ] {
        assert_eq!(id.to_string(), s);
        assert_eq!(s.parse::<DeviceId>().unwrap(), id);
    }
    for bad in
        ["", "gpu", "cuda", "cuda:", "cuda:-1", "cuda:x", "cuda:99999999999", "CPU", "cuda:0 ", " cpu", "cuda: 1"]
    {
        let err = bad.parse::<DeviceId>().unwrap_err();
        assert!(matches!(err, Error::ParseDevice { .. }), "{bad}: {err}");
        assert!(err.to_string().contains(&format!("`{bad}`")), "{err}");
    }
}

#[test]
fn a_missing_device_is_an_error_at_first_use() {
    let count = locus::device_count().unwrap();
    let err = Tensor::<Cuda<7>>::zeros([2]).unwrap_err();
    assert_eq!(err, Error::NoSuchDevice { ordinal: 7, count });
    assert!(err.to_string().contains("cuda:7"), "{err}");
    let err = Tensor::<Cuda<{ usize::MAX }>>::ones([1]).unwrap_err();
    assert!(matches!(err, Error::NoSuchDevice { .. }));
    let err = Tensor::<Cuda<0>>::ones([1]).unwrap().to_dyn(DeviceId::Cuda(9)).unwrap_err();
    assert!(matches!(err, Error::NoSuchDevice { ordinal: 9, .. }));
}

// The pinned account is process-wide: the test that counts it runs alone with the one
// that pins.
static PINNED: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn copies_cross_every_pair_of_placements() -> locus::Result<()> {
    let _alone = PINNED.lock().unwrap_or_else(|p| p.into_inner());
    let data = vec![1.5f32, -2.0, 3.25];
    let c = Tensor::<Cpu>::from_vec(data.clone(), [3])?;
    let p = c.to::<Pinned>()?;
    let g = p.to::<Cuda<0>>()?;
    let back = g.to::<Cpu>()?;
    assert_eq!(back.to_vec()?, data);
    assert_eq!(g.to::<Pinned>()?.to_vec()?, data);
    assert_eq!(c.to::<Cuda<0>>()?.to_vec()?, data);
    assert_eq!(g.to::<Cuda<0>>()?.device(), DeviceId::Cuda(0));
    if locus::testing::needs_devices_for(2, "the copy to cuda:1")? {
        let g1 = g.to::<Cuda<1>>()?;
        assert_eq!(g1.device(), DeviceId::Cuda(1));
        assert_eq!(g1.to_vec()?, data);
    }
    Ok(())
}

#[test]
fn dyn_operands_are_checked_at_run_time() -> locus::Result<()> {
    let a = Tensor::<Cuda<0>>::ones([2])?.into_dyn();
    let h = Tensor::<Cpu>::ones([2])?.into_dyn();
    let err = (&a + &h).unwrap_err();
    assert_eq!(err, Error::DeviceMismatch { op: "add", lhs: DeviceId::Cuda(0), rhs: DeviceId::Cpu });
    assert_eq!(err.to_string(), "add: lhs is on cuda:0 but rhs is on cpu; move one with .to(..) or .to_dyn(..) first");
    assert!(matches!(a.matmul(&h), Err(Error::DeviceMismatch { op: "matmul", .. })));
    assert!(matches!(a.cat(&h), Err(Error::DeviceMismatch { op: "cat", .. })));
    assert!(matches!(Tensor::concat(&[&a, &h]), Err(Error::DeviceMismatch { op: "cat", .. })));
    // A static operand with a Dyn one is allowed and checked.
    let s = Tensor::<Cuda<0>>::full([2], 3.0)?;
    assert_eq!((&s * &a)?.to_vec()?, vec![3.0, 3.0]);
    assert!(matches!(&s - &h, Err(Error::DeviceMismatch { op: "sub", .. })));
    let moved = h.to_dyn(DeviceId::Cuda(0))?;
    assert_eq!((&a + &moved)?.to_vec()?, vec![2.0, 2.0]);
    let made = Tensor::<Dyn, i32>::arange_on(Dyn::new("cuda:0".parse()?), 0, 3, 1)?;
    assert_eq!(made.device(), DeviceId::Cuda(0));
    Ok(())
}

#[test]
fn dyn_events_and_streams_of_two_devices_are_checked_at_run_time() -> locus::Result<()> {
    if !locus::testing::needs_devices(2)? {
        return Ok(());
    }
    let s1 = Stream::new_on(Dyn::new(DeviceId::Cuda(1)))?;
    let e0 = Event::new_on(Dyn::new(DeviceId::Cuda(0)))?;
    for (op, err) in [("record", e0.record(&s1)), ("wait_event", s1.wait_event(&e0)), ("wait_event", e0.wait(&s1))] {
        let err = err.unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { op: o, .. } if o == op), "{err}");
        assert!(err.to_string().contains("cuda:0") && err.to_string().contains("cuda:1"), "{err}");
    }
    let s0 = Stream::new_on(Dyn::new(DeviceId::Cuda(0)))?;
    e0.record(&s0)?;
    s0.wait_event(&e0)?;
    // A static stream takes a `Dyn` event of its device, checked the same way.
    Stream::<Cuda<0>>::new()?.wait_event(&e0)?;
    assert!(Stream::<Cuda<1>>::new()?.wait_event(&e0).is_err());
    Ok(())
}

#[test]
fn memory_is_counted_per_device() -> locus::Result<()> {
    let _alone = PINNED.lock().unwrap_or_else(|p| p.into_inner());
    let dev = DeviceId::Pinned;
    let before = locus::memory_allocated(dev)?;
    let t = Tensor::<Pinned>::zeros([1024])?;
    assert_eq!(locus::memory_allocated(dev)?, before + 4096);
    assert!(locus::max_memory_allocated(dev)? >= before + 4096);
    drop(t);
    assert_eq!(locus::memory_allocated(dev)?, before);
    locus::reset_peak_memory_stats(dev)?;
    assert_eq!(locus::max_memory_allocated(dev)?, before);
    Ok(())
}

#[test]
fn an_oversized_allocation_is_out_of_memory_and_the_device_still_works() -> locus::Result<()> {
    let err = Tensor::<Cuda<0>, u8>::zeros([200usize << 30]).unwrap_err();
    assert!(
        matches!(err, Error::OutOfMemory { device: DeviceId::Cuda(0), requested, .. } if requested == 200 << 30),
        "{err}"
    );
    assert_eq!(Tensor::<Cuda<0>>::ones([4])?.sum()?.item()?, 4.0);
    Ok(())
}
