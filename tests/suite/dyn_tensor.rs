//! `Tensor<Dyn>`: conversions to and from static placements, factories on the current
//! device under nested guards and threads, and the device list.
//!
//! Runs with any number of devices; what needs `cuda:1` is skipped, with its reason, when
//! there is one (an error under `LOCUS_EXPECT_DEVICES=2` or more).

use locus::{current_device, on_device, with_device, Cpu, Cuda, DeviceGuard, DeviceId, Dyn, Error, Pinned, Tensor};

fn second_gpu(test: &str) -> Option<DeviceId> {
    let two = locus::testing::needs_devices_for(2, &format!("the cuda:1 part of {test}")).unwrap();
    two.then_some(DeviceId::Cuda(1))
}

#[test]
fn into_dyn_and_from_erase_the_placement_without_copying() -> locus::Result<()> {
    let s = Tensor::<Cuda<0>>::from_vec(vec![1.0, 2.0], [2])?;
    let before = s.to_vec()?;
    let a = s.clone().into_dyn();
    let b: Tensor<Dyn> = Tensor::from(s);
    let c: Tensor<Dyn> = Tensor::<Pinned>::ones([1])?.into();
    assert_eq!((a.device(), b.device(), c.device()), (DeviceId::Cuda(0), DeviceId::Cuda(0), DeviceId::Pinned));
    assert_eq!(a.to_vec()?, before);
    assert_eq!(b.to_vec()?, before);
    Ok(())
}

#[test]
fn try_into_device_succeeds_where_the_tensor_is_and_names_where_it_is_otherwise() -> locus::Result<()> {
    let d = Tensor::<Cpu>::from_vec(vec![3.0], [1])?.to_dyn(DeviceId::Cuda(0))?;
    let s: Tensor<Cuda<0>> = d.clone().try_into_device::<Cuda<0>>()?;
    assert_eq!(s.to_vec()?, vec![3.0]);
    let s2 = Tensor::<Cuda<0>>::try_from(d.clone())?;
    assert_eq!(s2.shape(), &[1]);

    let err = d.clone().try_into_device::<Cpu>().unwrap_err();
    assert_eq!(err, Error::NotOnDevice { expected: DeviceId::Cpu, actual: DeviceId::Cuda(0) });
    let message = err.to_string();
    assert!(message.contains("is on cuda:0, not cpu"), "{message}");
    assert!(message.contains(".to_dyn(cpu)"), "{message}");
    let err = Tensor::<Pinned>::try_from(d.clone()).unwrap_err();
    assert!(matches!(err, Error::NotOnDevice { expected: DeviceId::Pinned, actual: DeviceId::Cuda(0) }));
    let err = d.clone().try_into_device::<Cuda<4096>>().unwrap_err();
    assert!(matches!(err, Error::NotOnDevice { actual: DeviceId::Cuda(0), .. }));
    if let Some(one) = second_gpu("try_into_device") {
        let moved = d.to_dyn(one)?;
        let err = moved.clone().try_into_device::<Cuda<0>>().unwrap_err();
        assert_eq!(err, Error::NotOnDevice { expected: DeviceId::Cuda(0), actual: one });
        assert_eq!(moved.try_into_device::<Cuda<1>>()?.to_vec()?, vec![3.0]);
    }
    Ok(())
}

#[test]
fn a_static_tensor_converted_to_its_own_placement_is_unchanged() -> locus::Result<()> {
    let s = Tensor::<Pinned, i32>::arange(0, 3, 1)?;
    let same = s.try_into_device::<Pinned>()?;
    assert_eq!(same.to_vec()?, vec![0, 1, 2]);
    let err = same.try_into_device::<Cpu>().unwrap_err();
    assert!(matches!(err, Error::NotOnDevice { expected: DeviceId::Cpu, actual: DeviceId::Pinned }));
    Ok(())
}

#[test]
fn device_names_parse_into_dyn_placements() -> locus::Result<()> {
    let t = Tensor::<Dyn>::zeros_on(Dyn::new("cuda:0".parse()?), [2])?;
    assert_eq!(t.device(), DeviceId::Cuda(0));
    let moved = t.to_dyn("pinned".parse()?)?;
    assert_eq!(moved.device(), DeviceId::Pinned);
    let err = "cuda:one".parse::<DeviceId>().unwrap_err();
    assert!(matches!(err, Error::ParseDevice { .. }), "{err}");
    let missing = Tensor::<Dyn>::ones_on(Dyn::new("cuda:4096".parse()?), [1]).unwrap_err();
    assert!(matches!(missing, Error::NoSuchDevice { ordinal: 4096, .. }));
    Ok(())
}

#[test]
fn factories_use_the_cpu_without_a_guard() -> locus::Result<()> {
    assert_eq!(current_device(), DeviceId::Cpu);
    assert_eq!(Tensor::<Dyn>::zeros_current([2])?.device(), DeviceId::Cpu);
    assert_eq!(Tensor::<Dyn, i32>::arange_current(0, 2, 1)?.to_vec()?, vec![0, 1]);
    Ok(())
}

#[on_device(dyn device)]
fn made_under(device: DeviceId) -> locus::Result<Vec<DeviceId>> {
    Ok(vec![
        Tensor::<Dyn>::zeros_current([1])?.device(),
        Tensor::<Dyn>::ones_current([1])?.device(),
        Tensor::<Dyn, u8>::full_current([1], 3)?.device(),
        Tensor::<Dyn>::from_vec_current(vec![1.0], [1])?.device(),
        Tensor::<Dyn, i32>::from_slice_current(&[1], [1])?.device(),
        Tensor::<Dyn, f64>::arange_current(0.0, 1.0, 1.0)?.device(),
        Tensor::<Dyn>::rand_current([1], 0)?.device(),
    ])
}

#[test]
fn factories_follow_the_innermost_guard() -> locus::Result<()> {
    assert_eq!(made_under(DeviceId::Cuda(0))?, vec![DeviceId::Cuda(0); 7]);
    assert_eq!(made_under(DeviceId::Pinned)?, vec![DeviceId::Pinned; 7]);
    let _outer = DeviceGuard::enter(DeviceId::Pinned)?;
    let inner = with_device!(0 => {
        let t = Tensor::<Dyn>::zeros_current([1])?;
        // An explicit placement wins over the guard.
        let explicit = Tensor::<Dyn>::zeros_on(Dyn::new(DeviceId::Cpu), [1])?;
        let copied = t.to_dyn(DeviceId::Cpu)?;
        (t.device(), explicit.device(), copied.device())
    })?;
    assert_eq!(inner, (DeviceId::Cuda(0), DeviceId::Cpu, DeviceId::Cpu));
    assert_eq!(Tensor::<Dyn>::ones_current([1])?.device(), DeviceId::Pinned);
    if let Some(one) = second_gpu("factories_follow_the_innermost_guard") {
        let nested = DeviceGuard::run(DeviceId::Cuda(0), || {
            DeviceGuard::run(one, || Tensor::<Dyn>::zeros_current([1]).map(|t| t.device()))
        })???;
        assert_eq!(nested, one);
    }
    Ok(())
}

#[test]
fn factories_on_threads_follow_each_threads_guard() {
    let _main = DeviceGuard::enter(DeviceId::Pinned).unwrap();
    let spawned = std::thread::spawn(|| {
        let unguarded = Tensor::<Dyn>::zeros_current([1]).unwrap().device();
        let guarded = DeviceGuard::run(DeviceId::Cuda(0), || Tensor::<Dyn>::zeros_current([1]).unwrap().device());
        (unguarded, guarded.unwrap())
    });
    assert_eq!(spawned.join().unwrap(), (DeviceId::Cpu, DeviceId::Cuda(0)));
    assert_eq!(Tensor::<Dyn>::zeros_current([1]).unwrap().device(), DeviceId::Pinned);
}

#[test]
fn devices_lists_every_cuda_device() -> locus::Result<()> {
    let all = locus::devices()?;
    assert_eq!(all.len(), locus::device_count()?);
    assert!(!all.is_empty());
    for (i, d) in all.iter().enumerate() {
        assert_eq!(*d, DeviceId::Cuda(i as u32));
        DeviceGuard::run(*d, || ())?;
    }
    if let Ok(n) = std::env::var("LOCUS_HOST_DEVICES") {
        if locus::backend_name()? == "host" {
            assert_eq!(all.len().to_string(), n.trim());
        }
    }
    Ok(())
}
