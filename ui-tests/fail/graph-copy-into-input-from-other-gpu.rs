// New data for an input comes from its own device: a tensor of cuda:1 cannot be copied
// into an input of cuda:0 (copy it over with `.to::<Cuda<0>>()` first).
use locus::{Cuda, Graph, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let mut x = Tensor::<Cuda<0>>::ones([4])?;
    let mut g = Graph::capture(&s, &mut x, |x| x + 1.0)?;
    let fresh = Tensor::<Cuda<1>>::zeros([4])?;
    g.inputs_mut().copy_from(&fresh)?;
    g.replay()?;
    Ok(())
}
