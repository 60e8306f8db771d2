// An output view borrows the graph's memory: it cannot be used after the graph is
// dropped. Keep a copy with `to_tensor()` instead.
use locus::{Cuda, Graph, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let mut x = Tensor::<Cuda<0>>::ones([4])?;
    let mut g = Graph::capture(&s, &mut x, |x| x + 1.0)?;
    let y = g.replay()?;
    drop(g);
    y.to_vec()?;
    Ok(())
}
