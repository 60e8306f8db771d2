// `#[derive(ToDevice)]` rejects a struct without a device parameter, and that is the one
// error: the derive still implements `ToDevice`, so `.to::<..>()` on it raises none of
// its own.
use locus::{Cuda, Tensor, ToDevice};

#[derive(ToDevice)]
struct Model {
    weight: Tensor<Cuda<0>>,
}

fn move_it(m: &Model) -> locus::Result<Model> {
    m.to::<Cuda<1>>()
}

fn main() {}
