// A string device is rejected, and that is the one error: `Here` in the signature and
// the body still names a placement (the `Cuda<1>` the message suggests), so its uses
// raise no "cannot find type `Here`" of their own.
// The glob import brings `locus::Here`, the placeholder that is no placement.
use locus::*;

#[on_device("cuda:1")]
fn step(x: &Tensor<Here>) -> locus::Result<Tensor<Here>> {
    let ones = Tensor::<Here>::ones([2])?;
    x + &ones
}

fn main() {}
