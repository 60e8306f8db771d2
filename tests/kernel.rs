//! User kernels (`#[locus::kernel]`) on the selected backend: a launch computes what its
//! host fallback (or its CUDA source) says, in place; it is ordered with the work around
//! it on any stream and inside graph captures; shared outputs are copied first; the
//! errors of a bad launch name the kernel.

mod common;

use common::{keep_busy, on_gpu};
use locus::{
    backend_name, cross_stream_waits, kernel, on_stream, Cpu, Cuda, Device, DeviceId, Dyn, Error, Graph, Grid, Stream,
    Tensor,
};

type G = Cuda<0>;

fn saxpy_host(a: f32, x: &[f32], y: &mut [f32], n: usize) {
    for i in 0..n {
        y[i] += a * x[i];
    }
}

/// `y = a * x + y`.
#[kernel(source = "tests/kernels/saxpy.cu", host = saxpy_host)]
fn saxpy<D: Device>(a: f32, x: &Tensor<D>, y: &mut Tensor<D>, n: usize);

/// The same kernel without a fallback: the host backend cannot run it.
#[kernel(source = "tests/kernels/saxpy.cu", name = "saxpy")]
fn saxpy_gpu_only<D: Device>(a: f32, x: &Tensor<D>, y: &mut Tensor<D>, n: usize);

#[allow(clippy::too_many_arguments)]
fn mix_host(x: &[f64], bytes: &[u8], ints: &[i32], out: &mut [f64], scale: f64, offset: i64, flag: bool, n: u32) {
    for i in 0..n as usize {
        out[i] = x[i] * scale + offset as f64 + if flag { bytes[i] as f64 } else { 0.0 } + ints[i] as f64;
    }
}

#[kernel(source = "tests/kernels/mixed.cu", host = mix_host)]
#[allow(clippy::too_many_arguments)]
fn mix<D: Device>(
    x: &Tensor<D, f64>,
    bytes: &Tensor<D, u8>,
    ints: &Tensor<D, i32>,
    out: &mut Tensor<D, f64>,
    scale: f64,
    offset: i64,
    flag: bool,
    n: u32,
);

fn row_stats_host(m: &[f32], sums: &mut [f32], positives: &mut [i32], rows: i32, cols: i32) {
    for r in 0..rows as usize {
        let row = &m[r * cols as usize..(r + 1) * cols as usize];
        sums[r] = row.iter().sum();
        positives[r] = row.iter().filter(|v| **v > 0.0).count() as i32;
    }
}

#[kernel(source = "tests/kernels/mixed.cu", host = row_stats_host)]
fn row_stats(
    m: &Tensor<Cuda<0>>,
    sums: &mut Tensor<Cuda<0>>,
    positives: &mut Tensor<Cuda<0>, i32>,
    rows: i32,
    cols: i32,
);

fn scale_host(k: f32, y: &mut [f32], n: u64) {
    for v in &mut y[..n as usize] {
        *v *= k;
    }
}

/// An inline kernel, named differently in C, with a grid-stride loop.
#[kernel(
    name = "scale_in_place",
    host = scale_host,
    source = r#"
        extern "C" __global__ void scale_in_place(float k, float* y, unsigned long long n) {
            for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
                 i += (unsigned long long)blockDim.x * gridDim.x) {
                y[i] *= k;
            }
        }
    "#
)]
fn scale<D: Device>(k: f32, y: &mut Tensor<D>, n: u64);

fn broken_host(_: &mut [f32]) {}

/// A kernel NVRTC rejects: the macro reads its declaration only.
#[kernel(host = broken_host, source = r#"extern "C" __global__ void broken(float* y) { y[0] = undefined_name; }"#)]
fn broken<D: Device>(y: &mut Tensor<D>);

#[kernel(name = "broken", source = r#"extern "C" __global__ void broken(float* y) { y[0] = undefined_name; }"#)]
fn broken_gpu_only<D: Device>(y: &mut Tensor<D>);

fn numbers(n: usize) -> Vec<f32> {
    (0..n).map(|i| i as f32 * 0.5 - 3.0).collect()
}

#[test]
fn a_launch_writes_its_outputs_in_place() -> locus::Result<()> {
    let x = Tensor::<G>::from_vec(numbers(1000), [1000])?;
    let mut y = Tensor::<G>::full([1000], 1.0)?;
    saxpy(2.0, &x, &mut y, 1000).launch()?;
    let want: Vec<f32> = numbers(1000).iter().map(|x| 2.0 * x + 1.0).collect();
    assert_eq!(y.to_vec()?, want);
    // Ops after it read the new values.
    assert_eq!((&y - &x)?.sum()?.item()?, want.iter().zip(numbers(1000)).map(|(y, x)| y - x).sum::<f32>());
    Ok(())
}

#[test]
fn a_shared_output_is_copied_first_and_the_other_tensor_keeps_its_values() -> locus::Result<()> {
    let x = Tensor::<G>::ones([8])?;
    let mut y = Tensor::<G>::full([8], 5.0)?;
    let before = y.clone();
    saxpy(1.0, &before, &mut y, 8).launch()?;
    assert_eq!(y.to_vec()?, vec![10.0; 8], "reads the old values of its own output");
    assert_eq!(before.to_vec()?, vec![5.0; 8]);
    saxpy(1.0, &x, &mut y, 8).launch()?;
    assert_eq!(y.to_vec()?, vec![11.0; 8]);
    assert_eq!(before.to_vec()?, vec![5.0; 8]);
    Ok(())
}

#[test]
fn every_scalar_and_element_type_reaches_the_kernel() -> locus::Result<()> {
    let x = Tensor::<G, f64>::from_vec(vec![1.0, 2.0, 3.0, 4.0], [4])?;
    let bytes = Tensor::<G, u8>::from_vec(vec![10, 20, 30, 255], [4])?;
    let ints = Tensor::<G, i32>::from_vec(vec![-1, 0, 1, 1 << 20], [4])?;
    let mut out = Tensor::<G, f64>::zeros([4])?;
    mix(&x, &bytes, &ints, &mut out, 0.5, -(1 << 40), true, 4).launch()?;
    let big = -(1i64 << 40) as f64;
    assert_eq!(out.to_vec()?, vec![0.5 + big + 9.0, 1.0 + big + 20.0, 1.5 + big + 31.0, 2.0 + big + 255.0 + 1048576.0]);
    mix(&x, &bytes, &ints, &mut out, 1.0, 0, false, 3).launch()?;
    assert_eq!(out.to_vec()?, vec![0.0, 2.0, 4.0, 2.0 + big + 255.0 + 1048576.0], "n = 3 leaves the last one");
    Ok(())
}

#[test]
fn a_kernel_with_two_outputs_and_an_explicit_grid() -> locus::Result<()> {
    let m = Tensor::<Cuda<0>>::from_vec(vec![1.0, -2.0, 3.0, 0.0, 0.5, 0.5], [3, 2])?;
    let mut sums = Tensor::<Cuda<0>>::zeros([3])?;
    let mut positives = Tensor::<Cuda<0>, i32>::zeros([3])?;
    row_stats(&m, &mut sums, &mut positives, 3, 2).grid(Grid::new([1, 1, 1], [32, 1, 1])).launch()?;
    assert_eq!(sums.to_vec()?, vec![-1.0, 3.0, 1.0]);
    assert_eq!(positives.to_vec()?, vec![1, 1, 2]);
    Ok(())
}

#[test]
fn an_inline_kernel_runs_under_its_c_name_with_a_grid_stride_loop() -> locus::Result<()> {
    let mut y = Tensor::<G>::from_vec(numbers(5000), [5000])?;
    scale(3.0, &mut y, 5000).grid(Grid::new([2, 1, 1], [128, 1, 1])).launch()?;
    assert_eq!(y.to_vec()?, numbers(5000).iter().map(|v| v * 3.0).collect::<Vec<_>>());
    Ok(())
}

#[test]
fn a_launch_on_a_side_stream_waits_for_its_inputs_and_orders_its_outputs() -> locus::Result<()> {
    let side = Stream::<G>::new()?;
    for round in 0..20 {
        // Written on the default stream behind a long queue of other work.
        keep_busy()?;
        let x = Tensor::<G>::from_vec(numbers(4096), [4096])?;
        let x = (&x * 2.0)?;
        let mut y = Tensor::<G>::zeros([4096])?;
        let waits = cross_stream_waits();
        saxpy(1.0, &x, &mut y, 4096).on(&side).launch()?;
        assert!(cross_stream_waits() > waits, "the side stream waits for the inputs' writer");
        // Read back on the default stream: it waits for the side stream's write.
        let z = (&y + 1.0)?;
        let want: Vec<f32> = numbers(4096).iter().map(|v| 2.0 * v + 1.0).collect();
        assert_eq!(z.to_vec()?, want, "round {round}");
        // Written again in place on the default stream after the side stream read x.
        on_stream(&side, || saxpy(-1.0, &z, &mut y, 4096).launch())?;
        scale(2.0, &mut y, 4096).launch()?;
        let want: Vec<f32> = numbers(4096).iter().map(|v| 2.0 * (2.0 * v - (2.0 * v + 1.0))).collect();
        assert_eq!(y.to_vec()?, want, "round {round}");
    }
    Ok(())
}

#[test]
fn a_kernel_is_captured_in_a_graph_and_replayed() -> locus::Result<()> {
    let s = Stream::<G>::new()?;
    let mut x = Tensor::<G>::from_vec(numbers(256), [256])?;
    let mut g = Graph::capture(&s, &mut x, |x| {
        let mut y = (x * 1.0)?;
        saxpy(2.0, x, &mut y, 256).launch()?;
        scale(0.5, &mut y, 256).launch()?;
        Ok(y)
    })?;
    let want = |v: &[f32]| v.iter().map(|x| 1.5 * x).collect::<Vec<_>>();
    assert_eq!(g.replay()?.to_vec()?, want(&numbers(256)));
    g.inputs_mut().copy_from_slice(&vec![2.0; 256])?;
    assert_eq!(g.replay()?.to_vec()?, vec![3.0; 256]);
    Ok(())
}

#[test]
fn a_kernel_writing_memory_from_outside_a_capture_is_refused() -> locus::Result<()> {
    let s = Stream::<G>::new()?;
    let mut x = Tensor::<G>::ones([16])?;
    let mut outside = Tensor::<G>::zeros([16])?;
    let r = Graph::capture(&s, &mut x, |x| {
        saxpy(1.0, x, &mut outside, 16).launch()?;
        Ok(())
    });
    assert!(matches!(r, Err(Error::NotCapturable { .. })), "{r:?}");
    assert_eq!(outside.to_vec()?, vec![0.0; 16]);
    Ok(())
}

#[test]
fn without_a_fallback_the_host_backend_refuses_naming_the_kernel() -> locus::Result<()> {
    let x = Tensor::<G>::ones([4])?;
    let mut y = Tensor::<G>::zeros([4])?;
    let r = saxpy_gpu_only(1.0, &x, &mut y, 4).launch();
    if on_gpu() {
        r?;
        assert_eq!(y.to_vec()?, vec![1.0; 4]);
    } else {
        let e = r.unwrap_err();
        assert_eq!(e, Error::NoHostKernel { kernel: "saxpy".into() });
        assert!(e.to_string().contains("host = path::to::fn"), "{e}");
        assert_eq!(y.to_vec()?, vec![0.0; 4], "nothing ran");
    }
    Ok(())
}

#[test]
fn nvrtc_errors_come_back_with_the_compiler_log() -> locus::Result<()> {
    let mut y = Tensor::<G>::zeros([4])?;
    if on_gpu() {
        for _ in 0..2 {
            match broken(&mut y).launch() {
                Err(Error::Kernel { name, message, .. }) => {
                    assert_eq!(name, "broken");
                    assert!(message.contains("undefined_name"), "{message}");
                }
                other => panic!("expected a compile error, got {other:?}"),
            }
        }
    } else {
        broken(&mut y).launch()?; // the fallback does nothing
        assert!(matches!(broken_gpu_only(&mut y).launch(), Err(Error::NoHostKernel { .. })));
    }
    Ok(())
}

#[test]
fn bad_launches_are_errors_naming_the_kernel() -> locus::Result<()> {
    let x = Tensor::<G>::ones([4])?;
    let mut y = Tensor::<G>::zeros([4])?;
    let big_block = saxpy(1.0, &x, &mut y, 4).grid(Grid::new([1, 1, 1], [2048, 1, 1])).launch();
    assert!(matches!(big_block, Err(Error::InvalidArgument { op: "saxpy", .. })), "{big_block:?}");
    let no_threads = saxpy(1.0, &x, &mut y, 4).grid(Grid::new([1, 1, 1], [0, 1, 1])).launch();
    assert!(matches!(no_threads, Err(Error::InvalidArgument { op: "saxpy", .. })), "{no_threads:?}");
    // Host placements: a CUDA kernel runs on a device.
    let hx = Tensor::<Cpu>::ones([4])?;
    let mut hy = Tensor::<Cpu>::zeros([4])?;
    let on_host = saxpy(1.0, &hx, &mut hy, 4).launch();
    assert!(matches!(on_host, Err(Error::InvalidArgument { op: "saxpy", .. })), "{on_host:?}");
    assert_eq!(y.to_vec()?, vec![0.0; 4]);
    Ok(())
}

#[test]
fn an_empty_output_launches_nothing() -> locus::Result<()> {
    let x = Tensor::<G>::zeros([0])?;
    let mut y = Tensor::<G>::zeros([0])?;
    saxpy(1.0, &x, &mut y, 0).launch()?;
    assert_eq!(y.to_vec()?, Vec::<f32>::new());
    Ok(())
}

#[test]
fn dyn_tensors_on_two_devices_are_a_device_mismatch() -> locus::Result<()> {
    if !locus::testing::needs_devices(2)? {
        return Ok(());
    }
    let x = Tensor::<Dyn>::ones_on(Dyn::new(DeviceId::Cuda(0)), [4])?;
    let mut y = Tensor::<Dyn>::zeros_on(Dyn::new(DeviceId::Cuda(1)), [4])?;
    let r = saxpy(1.0, &x, &mut y, 4).launch();
    assert_eq!(r, Err(Error::DeviceMismatch { op: "saxpy", lhs: DeviceId::Cuda(0), rhs: DeviceId::Cuda(1) }));
    // A static tensor with a Dyn one, on the same device, is fine.
    let mut y0 = Tensor::<Dyn>::zeros_on(Dyn::new(DeviceId::Cuda(1)), [4])?;
    let x1 = Tensor::<Cuda<1>>::full([4], 2.0)?;
    saxpy(1.0, &x1, &mut y0, 4).launch()?;
    assert_eq!(y0.to_vec()?, vec![2.0; 4]);
    // A stream of another device than the tensors' (Dyn).
    let s1 = Stream::<Cuda<1>>::new()?;
    let mut y = Tensor::<Dyn>::zeros_on(Dyn::new(DeviceId::Cuda(0)), [4])?;
    let x = Tensor::<Dyn>::ones_on(Dyn::new(DeviceId::Cuda(0)), [4])?;
    let r = saxpy(1.0, &x, &mut y, 4).on(&s1).launch();
    assert_eq!(r, Err(Error::DeviceMismatch { op: "saxpy", lhs: DeviceId::Cuda(0), rhs: DeviceId::Cuda(1) }));
    Ok(())
}

#[test]
fn kernels_run_on_every_device() -> locus::Result<()> {
    fn on<D: locus::StaticDevice>() -> locus::Result<Vec<f32>> {
        let x = Tensor::<D>::ones([3])?;
        let mut y = Tensor::<D>::full([3], 2.0)?;
        saxpy(4.0, &x, &mut y, 3).launch()?;
        y.to_vec()
    }
    assert_eq!(on::<Cuda<0>>()?, vec![6.0; 3]);
    if locus::testing::needs_devices_for(2, "the cuda:1 launch")? {
        assert_eq!(on::<Cuda<1>>()?, vec![6.0; 3]);
    }
    assert!(matches!(backend_name()?, "host" | "cuda"));
    Ok(())
}
