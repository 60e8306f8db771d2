// The only keyword is `dyn`; `device = 1` is not an argument of `#[on_device]`.
use locus::on_device;

#[on_device(device = 1)]
fn step() {}

fn main() {}
