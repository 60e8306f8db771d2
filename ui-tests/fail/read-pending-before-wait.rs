// An async device-to-host copy lands in a `Pending`: its data cannot be read before
// `.wait()`.
use locus::{Cuda, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let x = Tensor::<Cuda<0>>::ones([4])?;
    let pending = x.to_pinned_async(&s)?;
    let _early = pending.to_vec()?;
    Ok(())
}
