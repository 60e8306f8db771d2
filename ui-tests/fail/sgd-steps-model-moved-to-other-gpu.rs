// Moving the model without its optimizer: the old optimizer (state on `Cuda<0>`) cannot
// step the moved model. Move both with `(model, opt).to::<Cuda<1>>()`.
use locus::nn::Linear;
use locus::optim::Sgd;
use locus::{Cuda, ToDevice};

fn main() -> locus::Result<()> {
    let model = Linear::<Cuda<0>>::new(4, 2, 0)?;
    let mut opt = Sgd::new(0.1).momentum(0.9);
    opt.step(&mut model.to::<Cuda<0>>()?)?;
    let mut moved = model.to::<Cuda<1>>()?;
    opt.step(&mut moved)?;
    Ok(())
}
