// A graphed training step borrows the model and its optimizer for as long as it lives:
// every replay updates the weights in place, so a direct step, or a read that does not
// go through the graph, while it can still replay does not compile.
use locus::nn::{Linear, Module};
use locus::optim::AdamW;
use locus::{Cuda, GraphedStep, Stream, Tensor};

fn main() -> locus::Result<()> {
    let stream = Stream::<Cuda<0>>::new()?;
    let mut model = Linear::<Cuda<0>>::new(2, 1, 0)?;
    let mut opt = AdamW::new(1e-3);
    let (mut x, mut y) = (Tensor::<Cuda<0>>::zeros([4, 2])?, Tensor::<Cuda<0>>::zeros([4, 1])?);
    let mut step = GraphedStep::capture(&stream, &mut model, &mut opt, (&mut x, &mut y), |m, (x, y)| {
        (m.forward(x)? - y)?.square()?.mean()
    })?;
    step.replay()?;
    opt.step(&mut model)?;
    step.replay()?;
    Ok(())
}
