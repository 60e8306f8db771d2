// A const generic device: one copy of the fn per device it is called with.
use locus::{current_device, on_device, Cuda, DeviceId, Tensor};

#[on_device(N)]
fn double<const N: usize>(x: &Tensor<Cuda<N>>) -> locus::Result<Tensor<Cuda<N>>> {
    assert_eq!(current_device(), DeviceId::Cuda(N as u32));
    x * 2.0
}

fn main() -> locus::Result<()> {
    let y = double(&Tensor::<Cuda<0>>::ones([1])?)?;
    assert_eq!(y.to_vec()?, vec![2.0]);
    Ok(())
}
