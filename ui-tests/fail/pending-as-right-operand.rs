// A `Pending` tensor cannot be the right operand of an op either: wait for it first.
use locus::{Cuda, Pinned, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let x = Tensor::<Cuda<0>>::ones([4])?;
    let pending = x.to_pinned_async(&s)?;
    let y = Tensor::<Pinned>::ones([4])?;
    let _z = (&y * &pending)?;
    Ok(())
}
