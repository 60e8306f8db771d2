// A device is an ordinal, not a string: `#[on_device(1)]`, not `"cuda:1"`.
use locus::on_device;

#[on_device("cuda:1")]
fn step() {}

fn main() {}
