// `#[on_device]` on a struct is rejected, and that is the one error: `Here` in its
// fields still names a placement, so it raises no error of its own.
// The glob import brings `locus::Here`, the placeholder that is no placement.
use locus::*;

#[on_device(0)]
struct Model {
    weight: Tensor<Here>,
}

fn main() {}
