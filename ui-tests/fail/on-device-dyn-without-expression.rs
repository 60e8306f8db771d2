// `dyn` says the device is known at run time; the expression giving it is missing.
use locus::on_device;

#[on_device(dyn)]
fn step() {}

fn main() {}
