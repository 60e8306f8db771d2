// Integer results never carry gradients: `backward` exists for float tensors only.
use locus::{Cuda, Tensor};

fn main() -> locus::Result<()> {
    let t = Tensor::<Cuda<0>, i32>::ones([2])?;
    t.sum()?.backward()?;
    Ok(())
}
