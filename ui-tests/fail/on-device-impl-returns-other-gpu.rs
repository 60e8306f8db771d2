// In an impl under `#[on_device(0)]`, a method returning a tensor on `cuda:1` is a mismatch.
use locus::{on_device, Cuda, Tensor};

struct Layer;

#[on_device(0)]
impl Layer {
    fn forward(&self, x: &Tensor<Here>) -> locus::Result<Tensor<Cuda<1>>> {
        x.to::<Cuda<1>>()
    }
}

fn main() {}
