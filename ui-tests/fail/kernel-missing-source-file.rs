// A source file that does not exist (relative to the crate's directory) is an error at
// its path.
use locus::{kernel, Device, Tensor};

#[kernel(source = "kernels/no_such_file.cu")]
fn saxpy<D: Device>(a: f32, x: &Tensor<D>, y: &mut Tensor<D>, n: usize);

fn main() {}
