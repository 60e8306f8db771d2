// An output view borrows the graph: new inputs cannot be written through `inputs_mut()`
// while one is still in use. Read the output (or copy it with `to_tensor()`) first.
use locus::{Cuda, Graph, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let mut x = Tensor::<Cuda<0>>::ones([4])?;
    let mut g = Graph::capture(&s, &mut x, |x| x + 1.0)?;
    let y = g.replay()?;
    g.inputs_mut().copy_from_slice(&[2.0; 4])?;
    y.to_vec()?;
    Ok(())
}
