// A fn on `cuda:1` whose signature takes a tensor on `cuda:0`: a mismatch at that type.
use locus::{on_device, Cuda, Tensor};

#[on_device(1)]
fn step(x: &Tensor<Cuda<0>>) -> locus::Result<Tensor<Cuda<1>>> {
    x.to::<Cuda<1>>()
}

fn main() {}
