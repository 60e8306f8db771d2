// A struct with no device parameter has no placement to change.
use locus::{Cuda, Tensor, ToDevice};

#[derive(ToDevice)]
struct Model {
    weight: Tensor<Cuda<0>>,
}

fn main() {}
