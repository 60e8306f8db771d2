// `Here` needs a literal device; with `#[on_device(N)]` the placement is `Cuda<N>`.
use locus::{on_device, Tensor};

#[on_device(N)]
fn step<const N: usize>(x: &Tensor<Here>) -> locus::Result<Tensor<Here>> {
    x.relu()
}

fn main() {}
