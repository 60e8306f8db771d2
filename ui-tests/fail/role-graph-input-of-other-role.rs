// A graph captured on a stream of one role cannot take a tensor of another as input.
use locus::{role, Graph, Stream, Tensor};

role!(Encoder, Decoder);

fn main() -> locus::Result<()> {
    let s = Stream::<Encoder>::new()?;
    let mut x = Tensor::<Decoder>::ones([4])?;
    let _g = Graph::capture(&s, &mut x, |x| x + 1.0)?;
    Ok(())
}
