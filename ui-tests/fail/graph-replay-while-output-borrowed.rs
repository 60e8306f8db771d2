// The outputs of a replay are views of the graph's memory: the graph cannot replay (and
// overwrite them) while one is still in use. Read it, or copy it with `to_tensor()`, first.
use locus::{Cuda, Graph, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let mut x = Tensor::<Cuda<0>>::ones([4])?;
    let mut g = Graph::capture(&s, &mut x, |x| x + 1.0)?;
    let first = g.replay()?;
    g.replay()?;
    first.to_vec()?;
    Ok(())
}
