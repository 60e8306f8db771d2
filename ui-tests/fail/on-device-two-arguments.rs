// `#[on_device]` takes one device; a fn cannot run on two at once.
use locus::on_device;

#[on_device(0, 1)]
fn step() {}

fn main() {}
