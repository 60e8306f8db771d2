// Gradients exist for float element types only: an i32 tensor cannot be a parameter.
use locus::{Cuda, Param, Tensor};

fn main() -> locus::Result<()> {
    let _w = Param::new(Tensor::<Cuda<0>, i32>::ones([2])?);
    Ok(())
}
