// A `const fn` may run at compile time, where no device can be made current.
use locus::on_device;

#[on_device(0)]
const fn size() -> usize {
    4
}

fn main() {}
