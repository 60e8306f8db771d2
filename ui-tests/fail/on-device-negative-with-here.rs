// A negative device is rejected, and that is the one error: `Here` in the signature and
// the body still names a placement, so its uses raise no errors of their own.
// The glob import brings `locus::Here`, the placeholder that is no placement.
use locus::*;

#[on_device(-1)]
fn step(x: &Tensor<Here>) -> locus::Result<Tensor<Here>> {
    let ones = Tensor::<Here>::ones([2])?;
    x + &ones
}

fn main() {}
