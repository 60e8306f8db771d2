// Multiplying owned tensors on two GPUs does not compile.
#[allow(unused_imports)]
use locus::{Cpu, Cuda, Pinned, Tensor};

fn main() -> locus::Result<()> {
    let a = Tensor::<Cuda<1>>::ones([2])?;
    let b = Tensor::<Cuda<0>>::ones([2])?;
    let _c = (a * b)?;
    Ok(())
}
