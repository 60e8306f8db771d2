// A kernel without `extern "C"` has a C++-mangled name that cannot be found at run time.
use locus::{kernel, Device, Tensor};

#[kernel(source = r#"
    __global__ void zero(float* y, size_t n) {
        size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
        if (i < n) y[i] = 0.0f;
    }
"#)]
fn zero<D: Device>(y: &mut Tensor<D>, n: usize);

fn main() {}
