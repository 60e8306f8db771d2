// Both branches of `where_` live where the mask does (the doc example of
// `Tensor::where_`).
use locus::{Cpu, Cuda, Tensor};

fn main() -> locus::Result<()> {
    let m = Tensor::<Cuda<0>, u8>::ones([2])?;
    let a = Tensor::<Cuda<0>>::zeros([2])?;
    let b = Tensor::<Cpu>::zeros([2])?;
    let _ = Tensor::where_(&m, &a, &b)?;
    Ok(())
}
