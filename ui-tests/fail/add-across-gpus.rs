// Adding tensors on two different GPUs does not compile: copy one side first.
use locus::{Cuda, Tensor};

fn main() -> locus::Result<()> {
    let a = Tensor::<Cuda<0>>::ones([2])?;
    let b = Tensor::<Cuda<1>>::ones([2])?;
    let _c = (&a + &b)?;
    Ok(())
}
