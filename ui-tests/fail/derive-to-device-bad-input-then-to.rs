// `#[derive(ToDevice)]` rejects an enum, and that is the one error: the derive still
// implements `ToDevice`, so `.to::<..>()` and `.to_dyn(..)` on the enum raise none of
// their own.
use locus::{Cpu, Cuda, Device, DeviceId, Dyn, Tensor, ToDevice};

#[derive(ToDevice)]
enum Weights<D: Device> {
    Dense(Tensor<D>),
    Empty,
}

fn move_it(w: &Weights<Cpu>) -> locus::Result<(Weights<Cuda<0>>, Weights<Dyn>)> {
    Ok((w.to::<Cuda<0>>()?, w.to_dyn(DeviceId::Cuda(0))?))
}

fn main() {}
