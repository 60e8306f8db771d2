// `dyn` takes an ordinal or a `DeviceId`; a string has to be parsed first.
use locus::on_device;

#[on_device(dyn name)]
fn step(name: &str) {}

fn main() {}
