// A layer's weights and its input must share a placement: copy the input first.
use locus::nn::Linear;
use locus::{Cuda, Tensor};

fn main() -> locus::Result<()> {
    let layer = Linear::<Cuda<0>>::new(4, 2, 0)?;
    let x = Tensor::<Cuda<1>>::ones([3, 4])?;
    let _y = layer.apply(&x)?;
    Ok(())
}
