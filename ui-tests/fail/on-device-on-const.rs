// `#[on_device]` on a const: there is no run time at which to enter the device.
use locus::on_device;

#[on_device(0)]
const SIZE: usize = 4;

fn main() {}
