// `#[derive(ToDevice)]` handles structs; an enum is moved by a hand-written impl.
use locus::{Device, Tensor, ToDevice};

#[derive(ToDevice)]
enum Weights<D: Device> {
    Dense(Tensor<D>),
    Empty,
}

fn main() {}
