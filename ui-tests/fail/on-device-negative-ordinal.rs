// CUDA ordinals start at 0: a negative device does not compile.
use locus::on_device;

#[on_device(-1)]
fn step() {}

fn main() {}
