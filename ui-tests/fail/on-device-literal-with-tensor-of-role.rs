// Under `#[on_device(0)]` a tensor of a role is of another placement, even if the role
// is bound to cuda:0 at run time.
use locus::{on_device, role, Tensor};

role!(Encoder);

#[on_device(0)]
fn step(x: &Tensor<Encoder>) -> locus::Result<Tensor<Here>> {
    x.to::<Here>()
}

fn main() {}
