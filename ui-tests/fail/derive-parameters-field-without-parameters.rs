// `#[derive(Parameters)]` visits every field that mentions the device parameter: one
// whose type lists no parameters is reported at that field.
use locus::{Device, Parameters};
use locus::nn::Linear;
use std::marker::PhantomData;

struct Counter<D: Device> {
    _on: PhantomData<D>,
}

#[derive(Parameters)]
struct Model<D: Device> {
    layer: Linear<D>,
    counter: Counter<D>,
}

fn main() {}
