// A field mentioning the device must itself be `ToDevice`; a HashMap of tensors is not.
use std::collections::HashMap;

use locus::{Device, Tensor, ToDevice};

#[derive(ToDevice)]
struct Model<D: Device> {
    named: HashMap<String, Tensor<D>>,
}

fn main() {}
