// A `Pending` tensor is not a tensor yet: it cannot be an operand.
use locus::{Cuda, Pinned, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let x = Tensor::<Cuda<0>>::ones([4])?;
    let pending = x.to_pinned_async(&s)?;
    let y = Tensor::<Pinned>::ones([4])?;
    let _z = (&pending + &y)?;
    Ok(())
}
