// A graph of cuda:0 replays on streams of cuda:0 only, not on a stream of cuda:1.
use locus::{Cuda, Graph, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let mut x = Tensor::<Cuda<0>>::ones([4])?;
    let mut g = Graph::capture(&s, &mut x, |x| x + 1.0)?;
    g.replay_on(&Stream::<Cuda<1>>::new()?)?;
    Ok(())
}
