// Moving the pinned source away (here into another thread) while its copy is in
// flight does not compile.
use locus::{Cpu, Cuda, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let src = Tensor::<Cpu>::ones([4])?.pin_memory()?;
    let copy = src.to_async(&s)?;
    std::thread::spawn(move || drop(src));
    let _x = copy.wait()?;
    Ok(())
}
