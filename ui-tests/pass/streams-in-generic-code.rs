// Generic code over one placement `D` uses its tensors, streams and events together with
// no extra bound.
use locus::{Cuda, Device, Event, Stream, Tensor};

fn copy_back<D: Device>(x: &Tensor<D>, s: &Stream<D>, e: &Event<D>) -> locus::Result<Vec<f32>> {
    x.record_stream(s)?;
    e.record(s)?;
    s.wait_event(e)?;
    x.to_pinned_async(s)?.wait()?.to_vec()
}

fn main() -> locus::Result<()> {
    let x = Tensor::<Cuda<0>>::full([2], 3.0)?;
    let back = copy_back(&x, &Stream::new()?, &Event::new()?)?;
    assert_eq!(back, vec![3.0, 3.0]);
    Ok(())
}
