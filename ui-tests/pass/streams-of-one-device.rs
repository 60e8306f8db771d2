// Streams, events and tensors of one device work together.
use locus::{on_stream, Cuda, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let t = on_stream(&s, || Tensor::<Cuda<0>>::ones([4]))?;
    t.record_stream(&s)?;
    let e = s.record_event()?;
    Stream::<Cuda<0>>::default_stream()?.wait_event(&e)?;
    assert_eq!(t.sum()?.item()?, 4.0);
    Ok(())
}
