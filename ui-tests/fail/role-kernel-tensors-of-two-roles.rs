// A kernel's tensors share one placement: tensors of two roles do not compile together.
use locus::{kernel, role, Device, Tensor};

role!(Encoder, Decoder);

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
    let x = Tensor::<Encoder>::ones([4])?;
    let mut y = Tensor::<Decoder>::zeros([4])?;
    saxpy(2.0, &x, &mut y, 4).launch()
}
