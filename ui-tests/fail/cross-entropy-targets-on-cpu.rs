// The class targets of `cross_entropy` live where the logits do (the doc example of
// `Tensor::cross_entropy`).
use locus::{Cpu, Cuda, Tensor};

fn main() -> locus::Result<()> {
    let logits = Tensor::<Cuda<0>>::zeros([2, 3])?;
    let targets = Tensor::<Cpu, i32>::zeros([2])?;
    let _ = logits.cross_entropy(&targets)?;
    Ok(())
}
