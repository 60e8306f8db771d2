// The pinned source of an async copy stays borrowed until the copy is waited: it
// cannot be dropped while the copy may still read it.
use locus::{Cpu, Cuda, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let src = Tensor::<Cpu>::ones([4])?.pin_memory()?;
    let copy = src.to_async(&s)?;
    drop(src);
    let _x = copy.wait()?;
    Ok(())
}
