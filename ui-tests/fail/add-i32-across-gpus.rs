// The rule holds for every element type, here i32.
#[allow(unused_imports)]
use locus::{Cpu, Cuda, Pinned, Tensor};

fn main() -> locus::Result<()> {
    let a = Tensor::<Cuda<0>, i32>::ones([2])?;
    let b = Tensor::<Cuda<1>, i32>::ones([2])?;
    let _c = (b + &a)?;
    Ok(())
}
