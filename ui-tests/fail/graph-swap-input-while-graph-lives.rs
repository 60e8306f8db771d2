// An input cannot be written through a `&mut` of its own (here `std::mem::swap`) while
// its graph lives: only `g.inputs_mut()` writes it, ordered with the replays.
use locus::{Cuda, Graph, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let mut x = Tensor::<Cuda<0>>::ones([4])?;
    let mut other = Tensor::<Cuda<0>>::zeros([4])?;
    let mut g = Graph::capture(&s, &mut x, |x| x + 1.0)?;
    std::mem::swap(&mut x, &mut other);
    g.replay()?;
    Ok(())
}
