// A graph borrows its inputs; it does not take them: pass `&mut x`, not `x`.
use locus::{Cuda, Graph, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let x = Tensor::<Cuda<0>>::ones([4])?;
    let _g = Graph::capture(&s, x, |x| x + 1.0)?;
    Ok(())
}
