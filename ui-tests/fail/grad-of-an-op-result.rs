// Gradients are kept for parameters only: reading the gradient of an op's result (a
// non-leaf, such as the loss) does not compile.
use locus::{Cuda, Param, Tensor};

fn main() -> locus::Result<()> {
    let w = Param::new(Tensor::<Cuda<0>>::ones([2])?);
    let loss = w.square()?.sum()?;
    loss.backward()?;
    let _g = loss.grad();
    Ok(())
}
