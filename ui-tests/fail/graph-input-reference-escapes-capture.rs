// The capture closure gets its inputs as references for the duration of the call only:
// one cannot be kept outside the closure (it would read the input behind the graph's back).
use locus::{Cuda, Graph, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let mut x = Tensor::<Cuda<0>>::ones([4])?;
    let mut kept: Option<&Tensor<Cuda<0>>> = None;
    let _g = Graph::capture(&s, &mut x, |x| {
        kept = Some(x);
        x + 1.0
    })?;
    drop(kept);
    Ok(())
}
