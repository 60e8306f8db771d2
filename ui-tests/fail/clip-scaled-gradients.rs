// Scaled gradients are a state of the model that the types track: while the `Scaled`
// holds the model, clipping cannot read its gradients (PyTorch's mistake of clipping
// before `unscale_`). Unscale first: `let grads = scaled.unscale()?;`.
use locus::nn::{Linear, Module};
use locus::optim::{clip_grad_norm, GradScaler};
use locus::{f16, Cuda, Tensor};

fn main() -> locus::Result<()> {
    let mut model = Linear::<Cuda<0>, f16>::new(4, 1, 0)?;
    let scaler = GradScaler::new();
    let loss = model.forward(&Tensor::ones([2, 4])?)?.sum()?;
    let scaled = scaler.backward(&loss, &mut model)?;
    clip_grad_norm(&model, 1.0)?;
    let _grads = scaled.unscale()?;
    Ok(())
}
