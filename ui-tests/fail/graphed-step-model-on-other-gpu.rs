// A graphed step's stream, model, optimizer and inputs share one placement: a model on
// `Cuda<1>` cannot be captured on a stream of `Cuda<0>`.
use locus::nn::{Linear, Module};
use locus::optim::AdamW;
use locus::{Cuda, GraphedStep, Stream, Tensor};

fn main() -> locus::Result<()> {
    let stream = Stream::<Cuda<0>>::new()?;
    let mut model = Linear::<Cuda<1>>::new(2, 1, 0)?;
    let mut opt = AdamW::new(1e-3);
    let (mut x, mut y) = (Tensor::<Cuda<0>>::zeros([4, 2])?, Tensor::<Cuda<0>>::zeros([4, 1])?);
    let _step = GraphedStep::capture(&stream, &mut model, &mut opt, (&mut x, &mut y), |m, (x, y)| {
        (m.forward(x)? - y)?.square()?.mean()
    })?;
    Ok(())
}
