// Pinned host memory is still host memory: multiplying it with a GPU tensor does not compile.
#[allow(unused_imports)]
use locus::{Cpu, Cuda, Pinned, Tensor};

fn main() -> locus::Result<()> {
    let a = Tensor::<Cuda<0>>::ones([2])?;
    let b = Tensor::<Pinned>::ones([2])?;
    let _c = (&a * &b)?;
    Ok(())
}
