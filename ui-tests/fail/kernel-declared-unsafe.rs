// A kernel's launch is safe by construction (the macro checks every pointer against its
// tensor), so its declaration takes no `unsafe`: the error names the qualifier.
use locus::{kernel, Device, Tensor};

#[kernel(source = r#"
    extern "C" __global__ void scale(float a, float* y, size_t n) {
        size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * y[i];
    }
"#)]
unsafe fn scale<D: Device>(a: f32, y: &mut Tensor<D>, n: usize);

fn main() {}
