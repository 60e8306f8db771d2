// An optimizer keeps its state on its parameters' placement: one made for `Cuda<0>`
// cannot step a model on `Cuda<1>`.
use locus::nn::Linear;
use locus::optim::AdamW;
use locus::Cuda;

fn main() -> locus::Result<()> {
    let mut model = Linear::<Cuda<1>>::new(4, 2, 0)?;
    let mut opt = AdamW::<Cuda<0>>::new(1e-3);
    opt.step(&mut model)?;
    Ok(())
}
