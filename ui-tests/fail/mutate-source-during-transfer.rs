// Writing to the pinned source while its async copy is in flight does not compile.
use locus::{Cpu, Cuda, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let mut src = Tensor::<Cpu>::ones([4])?.pin_memory()?;
    let copy = src.to_async(&s)?;
    src.as_mut_slice()?[0] = 2.0;
    let _x = copy.wait()?;
    Ok(())
}
