// A graph's outputs are the device tensors a replay writes: host data (here a `Vec<f32>`)
// cannot be an output.
use locus::{Cuda, Graph, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let mut x = Tensor::<Cuda<0>>::ones([4])?;
    let _g = Graph::capture(&s, &mut x, |_x| Ok(vec![1.0f32; 4]))?;
    Ok(())
}
