// An input cannot be replaced while its graph lives: the graph reads the old memory.
// New data goes in through `g.inputs_mut()`, which copies into that memory.
use locus::{Cuda, Graph, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let mut x = Tensor::<Cuda<0>>::ones([4])?;
    let mut g = Graph::capture(&s, &mut x, |x| x + 1.0)?;
    x = Tensor::<Cuda<0>>::zeros([4])?;
    g.replay()?;
    drop(g);
    assert_eq!(x.to_vec()?, vec![0.0; 4]);
    Ok(())
}
