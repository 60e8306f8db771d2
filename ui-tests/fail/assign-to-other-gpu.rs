// A tensor on cuda:0 cannot be stored where a tensor on cuda:1 is declared.
#[allow(unused_imports)]
use locus::{Cpu, Cuda, Pinned, Tensor};

fn main() -> locus::Result<()> {
    let _a: Tensor<Cuda<1>> = Tensor::<Cuda<0>>::ones([2])?;
    Ok(())
}
