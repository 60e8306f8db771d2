// `#[on_device]` goes on fns, methods and impl blocks; a struct has no code to guard.
use locus::on_device;

#[on_device(0)]
struct Model;

fn main() {}
