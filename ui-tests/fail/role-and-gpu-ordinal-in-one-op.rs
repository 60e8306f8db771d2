// A role is not an ordinal: a tensor of `Encoder` and one of `Cuda<0>` do not meet in an
// op, whatever `Encoder` is bound to.
use locus::{role, Cuda, Tensor};

role!(Encoder);

fn main() -> locus::Result<()> {
    let a = Tensor::<Encoder>::ones([4])?;
    let b = Tensor::<Cuda<0>>::ones([4])?;
    let _ = a.matmul(&b)?;
    Ok(())
}
