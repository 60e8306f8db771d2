// A graph's inputs are borrowed mutably (nothing else may write them while it lives, and
// `inputs_mut()` writes them): `&x` is not enough.
use locus::{Cuda, Graph, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let x = Tensor::<Cuda<0>>::ones([4])?;
    let _g = Graph::capture(&s, &x, |x| x + 1.0)?;
    Ok(())
}
