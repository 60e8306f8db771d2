// Adding a host tensor to a GPU tensor does not compile: copy it to the GPU first.
#[allow(unused_imports)]
use locus::{Cpu, Cuda, Pinned, Tensor};

fn main() -> locus::Result<()> {
    let a = Tensor::<Cuda<0>>::ones([2])?;
    let b = Tensor::<Cpu>::ones([2])?;
    let _c = (&a + &b)?;
    Ok(())
}
