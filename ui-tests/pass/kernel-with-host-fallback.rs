// A kernel with a host fallback runs on every placement of one device: static, generic
// and run-time (`Dyn`), on the current stream or a given one, with the default grid or
// an explicit one.
use locus::{kernel, on_stream, Cuda, Device, DeviceId, Dyn, Grid, Stream, Tensor};

fn saxpy_host(a: f32, x: &[f32], y: &mut [f32], n: usize) {
    for i in 0..n {
        y[i] += a * x[i];
    }
}

/// `y = a * x + y`.
#[kernel(source = r#"
    extern "C" __global__ void saxpy(float a, const float* x, float* y, size_t n) {
        size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
        if (i < n) y[i] = a * x[i] + y[i];
    }
"#, host = saxpy_host)]
pub fn saxpy<D: Device>(a: f32, x: &Tensor<D>, y: &mut Tensor<D>, n: usize);

fn twice<D: Device>(x: &Tensor<D>, y: &mut Tensor<D>) -> locus::Result<()> {
    let n = y.numel();
    saxpy(1.0, x, y, n).launch()?;
    saxpy(1.0, x, y, n).launch()
}

fn main() -> locus::Result<()> {
    let x = Tensor::<Cuda<0>>::ones([4])?;
    let mut y = Tensor::<Cuda<0>>::zeros([4])?;
    saxpy(2.0, &x, &mut y, 4).launch()?;
    twice(&x, &mut y)?;
    let s = Stream::<Cuda<0>>::new()?;
    saxpy(1.0, &x, &mut y, 4).on(&s).grid(Grid::linear(4)).launch()?;
    on_stream(&s, || saxpy(1.0, &x, &mut y, 4).launch())?;
    assert_eq!(y.to_vec()?, vec![6.0; 4]);

    let mut d = Tensor::<Dyn>::zeros_on(Dyn::new(DeviceId::Cuda(0)), [4])?;
    saxpy(3.0, &x, &mut d, 4).launch()?;
    assert_eq!(d.to_vec()?, vec![3.0; 4]);
    Ok(())
}
