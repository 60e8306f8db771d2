// A device ordinal is a whole number.
use locus::on_device;

#[on_device(1.0)]
fn step() {}

fn main() {}
