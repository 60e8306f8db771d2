// A stream of one role cannot order work on a tensor of another.
use locus::{role, Stream, Tensor};

role!(Encoder, Decoder);

fn main() -> locus::Result<()> {
    let t = Tensor::<Encoder>::ones([4])?;
    let s = Stream::<Decoder>::new()?;
    t.record_stream(&s)?;
    Ok(())
}
