// `Here` needs a literal device, and that is the one error: with `#[on_device(dyn ..)]`
// and `locus::Here` in scope, `Here` still stands for `Dyn` (what the message says to
// write), so its other uses raise no "`Here` is not a placement" of their own.
use locus::*;

#[on_device(dyn rank)]
fn step(rank: u32, x: &Tensor<Here>) -> locus::Result<Tensor<Here>> {
    let ones = Tensor::<Here>::ones_current([2])?;
    x + &ones
}

fn main() {}
