// An op with a scalar reads its tensor too: a `Pending` one must be waited for first.
use locus::{Cuda, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let x = Tensor::<Cuda<0>>::ones([4])?;
    let pending = x.to_pinned_async(&s)?;
    let _z = (&pending * 2.0)?;
    Ok(())
}
