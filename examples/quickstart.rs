//! The locus quickstart: tensors on two GPUs, a small computation, an explicit copy,
//! and the error a run-time (`Dyn`) placement mismatch gives.
//!
//! Runs on a GPU machine, and anywhere else on the host backend:
//!     cargo run --release --example quickstart

use locus::{Cpu, Cuda, StaticDevice, Tensor};

fn main() -> locus::Result<()> {
    let gpus = locus::device_count()?;
    println!("backend: {} ({gpus} CUDA device(s))", locus::backend_name()?);

    // A tiny layer on cuda:0: relu(x @ w + b). The placement is part of each type.
    let x = Tensor::<Cuda<0>>::rand([4, 3], 42)?;
    let w = Tensor::<Cuda<0>>::from_vec(vec![0.5, -1.0, 1.0, 0.25, -0.5, 2.0], [3, 2])?;
    let b = Tensor::<Cuda<0>>::from_vec(vec![0.1, -0.1], [2])?;
    let h = (x.matmul(&w)? + &b)?.relu()?;
    println!("h = relu(x @ w + b) on {}: shape {:?}", h.device(), h.shape());

    // The second placement is cuda:1 when there is one. On a one-GPU machine,
    // `Cuda<1>` is an error at first use, and the host stands in for it.
    match Tensor::<Cuda<1>>::zeros([1]) {
        Ok(_) => second_placement::<Cuda<1>>(&h),
        Err(e) => {
            println!("{e}: using the host as the second placement");
            second_placement::<Cpu>(&h)
        }
    }
}

fn second_placement<Other: StaticDevice>(h: &Tensor<Cuda<0>>) -> locus::Result<()> {
    // Data on another placement cannot join in directly: `h + &y` would not compile
    // ("tensors on `Cuda<0>` and `Cuda<1>` cannot be used in one op").
    // An explicit copy is the way across.
    let y = Tensor::<Other>::full([4, 2], 1.0)?;
    let z = (h + &y.to::<Cuda<0>>()?)?;
    println!("z = h + y (copied from {}): sum = {:.4}", y.device(), z.sum()?.item()?);

    // Back to the host for printing.
    let host: Tensor<Cpu> = z.to::<Cpu>()?;
    println!("z on the host: {:?}", host.to_vec()?);

    // With placements chosen at run time (`Dyn`), the same mistake compiles and is
    // caught when it runs, with both devices named.
    let a = h.clone().into_dyn();
    let c = y.into_dyn();
    match &a + &c {
        Ok(_) => println!("unexpected: a mixed-device add succeeded"),
        Err(e) => println!("run-time check: {e}"),
    }
    Ok(())
}
