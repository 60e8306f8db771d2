// An event of one role orders the streams of that role only.
use locus::{role, Event, Stream};

role!(Encoder, Decoder);

fn main() -> locus::Result<()> {
    let e = Event::<Encoder>::new()?;
    let s = Stream::<Decoder>::new()?;
    s.wait_event(&e)?;
    Ok(())
}
