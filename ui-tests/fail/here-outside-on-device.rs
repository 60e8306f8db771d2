// `Here` is the device of an enclosing `#[on_device(n)]`; elsewhere it is no placement.
use locus::{Here, Tensor};

fn step(_x: &Tensor<Here>) {}

fn main() {}
