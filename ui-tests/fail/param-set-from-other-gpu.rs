// New values of a parameter come from its own placement.
use locus::{Cuda, Param, Tensor};

fn main() -> locus::Result<()> {
    let mut w = Param::new(Tensor::<Cuda<0>>::ones([2])?);
    w.set(Tensor::<Cuda<1>>::zeros([2])?)?;
    Ok(())
}
