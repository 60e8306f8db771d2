// A Result fn propagates a failed guard with `?`: its error type needs From<locus::Error>.
use locus::on_device;

#[on_device(0)]
fn step() -> Result<u32, String> {
    Ok(1)
}

fn main() {}
