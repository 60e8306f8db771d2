// Pageable and pinned host memory are different placements too.
#[allow(unused_imports)]
use locus::{Cpu, Cuda, Pinned, Tensor};

fn main() -> locus::Result<()> {
    let a = Tensor::<Cpu>::ones([2])?;
    let b = Tensor::<Pinned>::ones([2])?;
    let _c = (&a - &b)?;
    Ok(())
}
