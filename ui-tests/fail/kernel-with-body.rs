// A kernel declaration has no Rust body: its body is the CUDA source.
use locus::{kernel, Device, Tensor};

#[kernel(source = r#"
    extern "C" __global__ void saxpy(float a, const float* x, float* y, size_t n) {
        size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i] + y[i];
    }
"#)]
fn saxpy<D: Device>(a: f32, x: &Tensor<D>, y: &mut Tensor<D>, n: usize) {}

fn main() {}
