// Even the shape of a `Pending` tensor is read through `.wait()`.
use locus::{Cuda, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let x = Tensor::<Cuda<0>>::ones([4])?;
    let pending = x.to_pinned_async(&s)?;
    let _shape = pending.shape();
    Ok(())
}
