// A float device on an impl block is rejected, and that is the one error: `Here` in its
// methods' signatures and bodies still names a placement (the `Cuda<1>` the message
// suggests), so a caller passing `Cuda<1>` tensors compiles too.
// The glob import brings `locus::Here`, the placeholder that is no placement.
use locus::*;

struct Layer;

#[on_device(1.0)]
impl Layer {
    fn forward(&self, x: &Tensor<Here>) -> locus::Result<Tensor<Here>> {
        let ones = Tensor::<Here>::ones([2])?;
        x + &ones
    }
}

fn run(layer: &Layer, x: &Tensor<Cuda<1>>) -> locus::Result<Tensor<Cuda<1>>> {
    layer.forward(x)
}

fn main() {}
