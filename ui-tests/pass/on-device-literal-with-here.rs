// A literal device: the body runs with cuda:0 current, and `Here` names `Cuda<0>`
// in the signature and the body.
use locus::{current_device, on_device, DeviceId, Tensor};

#[on_device(0)]
fn step(x: &Tensor<Here>) -> locus::Result<Tensor<Here>> {
    assert_eq!(current_device(), DeviceId::Cuda(0));
    let bias = Tensor::<Here>::ones(x.shape())?;
    x + &bias
}

fn main() -> locus::Result<()> {
    let x = Tensor::<locus::Cuda<0>>::zeros([2])?;
    assert_eq!(step(&x)?.to_vec()?, vec![1.0, 1.0]);
    assert_eq!(current_device(), DeviceId::Cpu);
    Ok(())
}
