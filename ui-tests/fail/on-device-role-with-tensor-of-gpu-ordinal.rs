// Under a role the signature's `Cuda<1>` is another placement, reported at its type.
use locus::{on_device, role, Cuda, Tensor};

role!(Encoder);

#[on_device(Encoder)]
fn step(x: &Tensor<Cuda<1>>) -> locus::Result<Tensor<Here>> {
    x.to::<Here>()
}

fn main() {}
