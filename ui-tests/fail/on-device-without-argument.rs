// `#[on_device]` needs a device: a literal, a const generic or `dyn <expr>`.
use locus::on_device;

#[on_device]
fn step() {}

fn main() {}
