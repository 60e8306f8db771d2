// A graph borrows its inputs mutably for as long as it lives: an input cannot be moved
// to another binding while the graph may still replay over its memory.
use locus::{Cuda, Graph, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let mut x = Tensor::<Cuda<0>>::ones([4])?;
    let mut g = Graph::capture(&s, &mut x, |x| x + 1.0)?;
    let moved = x;
    g.replay()?;
    drop(moved);
    Ok(())
}
