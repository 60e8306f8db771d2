// A pinned tensor copied with `to_async` on a stream of cuda:1 into a `Tensor<Cuda<0>>`:
// the copy lands on the stream's device, so the result is on cuda:1.
use locus::{Cpu, Cuda, Stream, Tensor};

fn main() -> locus::Result<()> {
    let p = Tensor::<Cpu>::ones([4])?.pin_memory()?;
    let s = Stream::<Cuda<1>>::new()?;
    let x: Tensor<Cuda<0>> = p.to_async(&s)?.wait()?;
    let _y = (&x * 2.0)?;
    Ok(())
}
