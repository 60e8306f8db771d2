// A device-to-host copy runs on a stream of the tensor's own device.
use locus::{Cuda, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<1>>::new()?;
    let x = Tensor::<Cuda<0>>::ones([4])?;
    let _pending = x.to_pinned_async(&s)?;
    Ok(())
}
