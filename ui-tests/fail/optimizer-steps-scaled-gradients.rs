// An optimizer cannot step a model whose gradients are still scaled: the `Scaled` is no
// model, and the model itself is held by it. Unscale, then `scaler.step(&mut opt, grads)`.
use locus::nn::{Linear, Module};
use locus::optim::{GradScaler, Sgd};
use locus::{f16, Cuda, Tensor};

fn main() -> locus::Result<()> {
    let mut model = Linear::<Cuda<0>, f16>::new(4, 1, 0)?;
    let mut opt = Sgd::new(0.1);
    let scaler = GradScaler::new();
    let loss = model.forward(&Tensor::ones([2, 4])?)?.sum()?;
    let mut scaled = scaler.backward(&loss, &mut model)?;
    opt.step(&mut scaled)?;
    Ok(())
}
