// Adding a bf16 tensor to an f32 tensor does not compile: locus has no implicit type
// promotion; convert one side with `.to_dtype::<..>()` first.
use locus::{bf16, Cuda, Tensor};

fn main() -> locus::Result<()> {
    let a = Tensor::<Cuda<0>>::ones([2])?;
    let b = Tensor::<Cuda<0>, bf16>::ones([2])?;
    let _c = (&a + &b)?;
    let _d = (a * b)?;
    Ok(())
}
