// `ToDevice` moves everything to one device, so the struct has one device parameter.
use locus::{Device, Tensor, ToDevice};

#[derive(ToDevice)]
struct Model<D: Device, E: Device> {
    encoder: Tensor<D>,
    decoder: Tensor<E>,
}

fn main() {}
