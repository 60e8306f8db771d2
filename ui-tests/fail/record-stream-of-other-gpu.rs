// A stream belongs to one device: a tensor on cuda:0 cannot be marked as used on a
// stream of cuda:1.
use locus::{Cuda, Stream, Tensor};

fn main() -> locus::Result<()> {
    let t = Tensor::<Cuda<0>>::ones([4])?;
    let s = Stream::<Cuda<1>>::new()?;
    t.record_stream(&s)?;
    Ok(())
}
