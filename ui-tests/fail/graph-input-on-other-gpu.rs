// A graph captures the work of one device: a graph on a stream of cuda:0 cannot take a
// tensor of cuda:1 as an input.
use locus::{Cuda, Graph, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let mut x = Tensor::<Cuda<1>>::ones([4])?;
    let _g = Graph::capture(&s, &mut x, |x| x + 1.0)?;
    Ok(())
}
