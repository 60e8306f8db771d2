// Typed replicas keep each device's checks: the replica on `Cuda<1>` takes a shard on
// `Cuda<1>`, not the one scattered to `Cuda<0>`.
use locus::nn::{Linear, Module};
use locus::parallel::{scatter, DataParallel};
use locus::{Cuda, DeviceId, Tensor};

fn main() -> locus::Result<()> {
    let dp = DataParallel::new(Linear::<Cuda<0>>::new(3, 1, 0)?, &[DeviceId::Cuda(0), DeviceId::Cuda(1)], Cuda::<0>)?;
    let (_r0, r1) = dp.replicas_on((Cuda::<0>, Cuda::<1>))?;
    let (x0, _x1) = scatter(&Tensor::<Cuda<0>>::ones([4, 3])?, (Cuda::<0>, Cuda::<1>))?;
    r1.forward(&x0)?;
    Ok(())
}
