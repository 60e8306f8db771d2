// Gradient clipping returns the norm on the model's placement.
use locus::nn::Linear;
use locus::{Cuda, Tensor};

fn main() -> locus::Result<()> {
    let model = Linear::<Cuda<0>>::new(4, 2, 0)?;
    let _norm: Option<Tensor<Cuda<1>>> = locus::optim::clip_grad_norm(&model, 1.0)?;
    Ok(())
}
