// A stream waits only for events of its own device: a stream of cuda:1 cannot wait for
// an event of cuda:0.
use locus::{Cuda, Event, Stream};

fn main() -> locus::Result<()> {
    let e = Event::<Cuda<0>>::new()?;
    let s = Stream::<Cuda<1>>::new()?;
    s.wait_event(&e)?;
    Ok(())
}
