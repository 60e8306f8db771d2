// An event of cuda:0 cannot be recorded on a stream of cuda:1.
use locus::{Cuda, Event, Stream};

fn main() -> locus::Result<()> {
    let e = Event::<Cuda<0>>::new()?;
    let s = Stream::<Cuda<1>>::new()?;
    e.record(&s)?;
    Ok(())
}
