//! `#[derive(ToDevice)]`: whole models moved between placements, PyTorch's
//! `module.to(device)`, with tensors, nested models, `Vec`s, `Option`s, placements
//! and plain fields.
//!
//! Round trips use every simulated device there is (`LOCUS_HOST_DEVICES=4` gives four).

use std::marker::PhantomData;

use locus::{Cpu, Cuda, Device, DeviceId, Dyn, Error, Tensor, ToDevice};

#[derive(ToDevice)]
struct Linear<D: Device> {
    weight: Tensor<D>,
    bias: Option<Tensor<D>>,
}

#[derive(ToDevice)]
struct Mlp<D>
where
    D: Device,
{
    name: String,
    layers: Vec<Linear<D>>,
    head: Box<Linear<D>>,
    steps: Tensor<D, i32>,
    placement: D,
    _device: PhantomData<D>,
}

#[derive(ToDevice)]
struct Pair<'a, D: Device, T: locus::Element, const K: usize>(Tensor<D, T>, [Tensor<D, T>; K], &'a str);

fn linear<D: locus::StaticDevice>(seed: u64, bias: bool) -> locus::Result<Linear<D>> {
    Ok(Linear {
        weight: Tensor::rand([3, 2], seed)?,
        bias: if bias { Some(Tensor::full([2], seed as f32)?) } else { None },
    })
}

fn mlp() -> locus::Result<Mlp<Cpu>> {
    Ok(Mlp {
        name: "mlp".into(),
        layers: vec![linear(1, true)?, linear(2, false)?],
        head: Box::new(linear(3, true)?),
        steps: Tensor::arange(0, 4, 1)?,
        placement: Cpu,
        _device: PhantomData,
    })
}

fn values(m: &Mlp<impl Device>) -> locus::Result<Vec<Vec<f32>>> {
    let mut out = Vec::new();
    for l in m.layers.iter().chain([&*m.head]) {
        out.push(l.weight.to_vec()?);
        out.push(l.bias.as_ref().map(|b| b.to_vec()).transpose()?.unwrap_or_default());
    }
    out.push(m.steps.to_vec()?.into_iter().map(|v| v as f32).collect());
    Ok(out)
}

fn devices(m: &Mlp<impl Device>) -> Vec<DeviceId> {
    let mut out = vec![m.placement.id(), m.steps.device(), m.head.weight.device()];
    for l in &m.layers {
        out.push(l.weight.device());
        out.extend(l.bias.as_ref().map(|b| b.device()));
    }
    out
}

#[test]
fn a_model_round_trips_through_every_device() -> locus::Result<()> {
    let start = mlp()?;
    let expected = values(&start)?;
    let count = locus::device_count()?;
    let mut on = start.to_dyn(DeviceId::Cuda(0))?;
    assert!(devices(&on).iter().all(|d| *d == DeviceId::Cuda(0)));
    for n in 1..count as u32 {
        on = on.to_dyn(DeviceId::Cuda(n))?;
        assert!(devices(&on).iter().all(|d| *d == DeviceId::Cuda(n)), "{:?}", devices(&on));
        assert_eq!(values(&on)?, expected);
    }
    if count < 4 {
        eprintln!("note: round trip over {count} device(s); LOCUS_HOST_DEVICES=4 covers four");
    }
    let back: Mlp<Cpu> = on.to::<Cpu>()?;
    assert_eq!(values(&back)?, expected);
    assert_eq!(back.name, "mlp");
    assert!(back.layers[1].bias.is_none());
    Ok(())
}

#[test]
fn static_placements_keep_their_types() -> locus::Result<()> {
    let gpu: Mlp<Cuda<0>> = mlp()?.to::<Cuda<0>>()?;
    let x = Tensor::<Cuda<0>>::ones([1, 3])?;
    // Typed `Cuda<0>`: the moved weights combine with other `Cuda<0>` tensors.
    let y = x.matmul(&gpu.layers[0].weight)?;
    assert_eq!(y.shape(), &[1, 2]);
    let l: Linear<locus::Pinned> = gpu.layers[0].to::<locus::Pinned>()?;
    assert_eq!(l.weight.device(), DeviceId::Pinned);
    Ok(())
}

#[test]
fn tuple_structs_with_arrays_and_plain_fields_move() -> locus::Result<()> {
    let p = Pair::<Cpu, i32, 2>(
        Tensor::from_vec(vec![1, 2], [2])?,
        [Tensor::full([1], 7)?, Tensor::full([1], 8)?],
        "label",
    );
    let q: Pair<Dyn, i32, 2> = p.to_dyn(DeviceId::Cuda(0))?;
    assert_eq!(q.0.to_vec()?, vec![1, 2]);
    assert_eq!(q.1[1].to_vec()?, vec![8]);
    assert_eq!(q.1[0].device(), DeviceId::Cuda(0));
    assert_eq!(q.2, "label");
    Ok(())
}

#[test]
fn moving_to_a_missing_device_is_an_error() -> locus::Result<()> {
    let err = mlp()?.to::<Cuda<4096>>().err().expect("cuda:4096 does not exist");
    assert!(matches!(err, Error::NoSuchDevice { ordinal: 4096, .. }), "{err}");
    let err = linear::<Cpu>(1, false)?.to_dyn(DeviceId::Cuda(4096)).err().expect("no such device");
    assert!(matches!(err, Error::NoSuchDevice { ordinal: 4096, .. }), "{err}");
    Ok(())
}
