// A kernel's tensors share one placement: passing tensors of two GPUs does not compile.
use locus::{kernel, Cuda, Device, Tensor};

fn saxpy_host(a: f32, x: &[f32], y: &mut [f32], n: usize) {
    for i in 0..n {
        y[i] += a * x[i];
    }
}

#[kernel(source = r#"
    extern "C" __global__ void saxpy(float a, const float* x, float* y, size_t n) {
        size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i] + y[i];
    }
"#, host = saxpy_host)]
fn saxpy<D: Device>(a: f32, x: &Tensor<D>, y: &mut Tensor<D>, n: usize);

fn main() -> locus::Result<()> {
    let x = Tensor::<Cuda<0>>::ones([4])?;
    let mut y = Tensor::<Cuda<1>>::zeros([4])?;
    saxpy(2.0, &x, &mut y, 4).launch()
}
