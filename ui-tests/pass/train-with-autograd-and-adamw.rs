// A training step with autograd: a derived model on one placement, its optimizer for the
// same placement, and the pair moved together.
use locus::nn::{self, Linear, Module};
use locus::optim::AdamW;
use locus::{Cpu, Cuda, Device, Parameters, Tensor, ToDevice};

#[derive(Parameters, ToDevice)]
struct Mlp<D: Device> {
    l1: Linear<D>,
    l2: Linear<D>,
}

impl<D: Device> Mlp<D> {
    fn forward(&self, x: &Tensor<D>) -> locus::Result<Tensor<D>> {
        self.l2.forward(&self.l1.forward(x)?.relu()?)
    }
}

fn main() -> locus::Result<()> {
    let mut model = Mlp::<Cuda<0>> { l1: Linear::new(4, 8, 0)?, l2: Linear::new(8, 1, 1)? };
    let mut opt = AdamW::new(1e-3);
    let x = Tensor::<Cuda<0>>::ones([2, 4])?;
    nn::zero_grad(&model);
    model.forward(&x)?.square()?.mean()?.backward()?;
    opt.step(&mut model)?;
    let (mut model, mut opt): (Mlp<Cpu>, AdamW<Cpu>) = (model, opt).to::<Cpu>()?;
    model.forward(&x.to::<Cpu>()?)?.sum()?.backward()?;
    opt.step(&mut model)?;
    Ok(())
}
