// A host fallback takes the kernel's parameters with slices for tensors; one that takes
// something else does not compile, and the error names the expected type.
use locus::{kernel, Device, Tensor};

fn saxpy_host(a: f32, x: &[f32], y: &[f32], n: usize) {
    let _ = (a, x, y, n);
}

#[kernel(source = r#"
    extern "C" __global__ void saxpy(float a, const float* x, float* y, size_t n) {
        size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i] + y[i];
    }
"#, host = saxpy_host)]
fn saxpy<D: Device>(a: f32, x: &Tensor<D>, y: &mut Tensor<D>, n: usize);

fn main() {}
