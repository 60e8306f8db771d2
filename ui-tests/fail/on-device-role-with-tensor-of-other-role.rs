// `#[on_device(Encoder)]` runs the fn on Encoder's device: a parameter on `Decoder` is
// reported at its type.
use locus::{on_device, role, Tensor};

role!(Encoder, Decoder);

#[on_device(Encoder)]
fn step(x: &Tensor<Here>, memory: &Tensor<Decoder>) -> locus::Result<Tensor<Here>> {
    let _ = memory;
    x * 2.0
}

fn main() {}
