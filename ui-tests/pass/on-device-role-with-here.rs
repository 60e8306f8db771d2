// `#[on_device(Role)]`: the role's device is current in the fn and `Here` names the role.
use locus::{current_device, on_device, role, DeviceId, Stream, Tensor};

role!(Encoder);

#[on_device(Encoder)]
fn step(x: &Tensor<Here>, y: &Tensor<Encoder>) -> locus::Result<Tensor<Here>> {
    assert_eq!(current_device(), DeviceId::Cuda(0));
    let s = Stream::<Here>::new()?;
    locus::on_stream(&s, || x + y)
}

fn main() -> locus::Result<()> {
    locus::bind::<Encoder>(DeviceId::Cuda(0))?;
    let x = Tensor::<Encoder>::ones([2])?;
    assert_eq!(step(&x, &x)?.to_vec()?, vec![2.0, 2.0]);
    let y = locus::with_device!(Encoder => Tensor::<Here>::zeros([2]))??;
    assert_eq!(y.sum()?.item()?, 0.0);
    Ok(())
}
