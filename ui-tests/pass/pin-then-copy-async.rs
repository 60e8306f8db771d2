// The right way: pin, copy asynchronously, use the device tensor on the same stream,
// wait, then reuse the source; device-to-host lands in a Pending that is waited.
use locus::{on_stream, Cpu, Cuda, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let mut src = Tensor::<Cpu>::arange(0.0, 4.0, 1.0)?.pin_memory()?;
    let copy = src.to_async(&s)?;
    let y = on_stream(&s, || copy.tensor() + 1.0)?;
    let x = copy.wait()?;
    src.as_mut_slice()?[0] = 10.0;
    let back = y.to_pinned_async(&s)?.wait()?;
    assert_eq!(back.as_slice(), &[1.0, 2.0, 3.0, 4.0]);
    assert_eq!(x.to_vec()?, vec![0.0, 1.0, 2.0, 3.0]);
    Ok(())
}
