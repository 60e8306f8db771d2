// `Here` needs a literal device, and that is the one error: with `#[on_device(N)]` and
// `locus::Here` in scope, `Here` still stands for `Cuda<N>` (what the message says to
// write), so its other uses raise no "`Here` is not a placement" of their own.
use locus::*;

#[on_device(N)]
fn step<const N: usize>(x: &Tensor<Here>) -> locus::Result<Tensor<Here>> {
    let ones = Tensor::<Here>::ones([2])?;
    x + &ones
}

fn main() {}
