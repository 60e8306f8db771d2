// Async copies read host memory while the host goes on, so they need page-locked
// memory: `to_async` on a pageable `Tensor<Cpu>` does not compile.
use locus::{Cpu, Cuda, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let host = Tensor::<Cpu>::ones([4])?;
    let _copy = host.to_async(&s)?;
    Ok(())
}
