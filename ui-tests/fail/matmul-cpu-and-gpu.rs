// A matmul of a host tensor with a GPU tensor does not compile.
#[allow(unused_imports)]
use locus::{Cpu, Cuda, Pinned, Tensor};

fn main() -> locus::Result<()> {
    let a = Tensor::<Cpu>::ones([2, 2])?;
    let b = Tensor::<Cuda<0>>::ones([2, 2])?;
    let _c = a.matmul(&b)?;
    Ok(())
}
