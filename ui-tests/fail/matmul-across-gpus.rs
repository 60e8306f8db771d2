// A matmul of tensors on two different GPUs does not compile.
use locus::{Cuda, Tensor};

fn main() -> locus::Result<()> {
    let a = Tensor::<Cuda<0>>::ones([2, 2])?;
    let b = Tensor::<Cuda<1>>::ones([2, 2])?;
    let _c = a.matmul(&b)?;
    Ok(())
}
