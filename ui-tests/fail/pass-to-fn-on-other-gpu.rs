// A fn that takes a tensor on cuda:1 does not accept one on cuda:0.
#[allow(unused_imports)]
use locus::{Cpu, Cuda, Pinned, Tensor};

fn main() -> locus::Result<()> {
    fn step(x: &Tensor<Cuda<1>>) -> locus::Result<Tensor<Cuda<1>>> {
        x.relu()
    }
    let a = Tensor::<Cuda<0>>::ones([2])?;
    let _b = step(&a)?;
    Ok(())
}
