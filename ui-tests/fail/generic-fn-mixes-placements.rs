// A generic fn over two placements cannot combine them without a bound saying they match.
#[allow(unused_imports)]
use locus::{Cpu, Cuda, Pinned, Tensor};

fn main() -> locus::Result<()> {
    fn mix<A: locus::Device, B: locus::Device>(a: &Tensor<A>, b: &Tensor<B>) -> locus::Result<Tensor<A>> {
        a + b
    }
    let _ = mix(&Tensor::<Cuda<0>>::ones([1])?, &Tensor::<Cuda<1>>::ones([1])?);
    Ok(())
}
