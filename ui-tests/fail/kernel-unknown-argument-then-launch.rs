// A rejected `#[kernel]` still declares its fn, so the unknown argument is the one
// error: the caller's `.grid(..)`, `.on(..)` and `.launch()` raise none of their own.
use locus::{kernel, Cuda, Device, Grid, Stream, Tensor};

#[kernel(source = r#"
    extern "C" __global__ void saxpy(float a, const float* x, float* y, size_t n) {
        size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i] + y[i];
    }
"#, block = 256)]
fn saxpy<D: Device>(a: f32, x: &Tensor<D>, y: &mut Tensor<D>, n: usize);

fn run(x: &Tensor<Cuda<0>>, y: &mut Tensor<Cuda<0>>) -> locus::Result<()> {
    let stream = Stream::<Cuda<0>>::new()?;
    saxpy(2.0, x, y, 2).grid(Grid::linear(2)).on(&stream).launch()
}

fn main() {}
