// A parameter's gradient is typed to the parameter's placement: it is no tensor of
// another GPU.
use locus::{Cuda, Param, Tensor};

fn main() -> locus::Result<()> {
    let w = Param::new(Tensor::<Cuda<0>>::ones([2])?);
    w.square()?.sum()?.backward()?;
    let _g: Option<Tensor<Cuda<1>>> = w.grad();
    Ok(())
}
