//! A training-style loop over a `Loader`: batches are built and pinned on worker
//! threads and copied to the GPU one batch ahead on a side stream, so the copy of batch
//! i + 1 overlaps the compute on batch i. Compares the loop with copy alone and compute
//! alone.
//!
//!     cargo run --release --example loader_pipeline
//!
//! With `LOCUS_TRACE=pipeline.json` it also writes a trace (Perfetto, chrome://tracing):
//! the copies on the loader's stream beside the compute on the default stream, the
//! workers building batches, and a `step i` range around each step (also an NVTX range
//! under Nsight: `ncu --nvtx --nvtx-include "step 3/"` profiles that step's kernels).

use std::time::Instant;

use locus::{synchronize, Cpu, Cuda, DeviceId, Loader, Tensor};

type G = Cuda<0>;

fn main() -> locus::Result<()> {
    println!("backend: {}", locus::backend_name()?);
    let gpu = locus::backend_name()? == "cuda";
    let (samples, features, batch) = if gpu { (65_536, 1024, 4096) } else { (2048, 64, 256) };
    let data = Tensor::<Cpu>::rand([samples, features], 7)?;
    let w = Tensor::<G>::rand([features, features], 8)?;
    let step = |x: &Tensor<G>| -> locus::Result<f32> {
        // A stand-in for a forward pass: two layers and a loss-like reduction.
        let h = x.matmul(&w)?.relu()?;
        h.matmul(&w)?.relu()?.mean()?.item()
    };

    // Warm up: kernels compile, cuBLAS starts and the pinned pool fills on first use,
    // which is a one-time cost, not the loop's.
    step(&data.to::<G>()?.chunk(samples / batch)?[0])?;
    for b in Loader::from_dataset(data.clone(), batch, Some(0))?.workers(4).prefetch(4).to::<G>()? {
        b?;
    }

    // The pipelined loop, with a progress bar.
    synchronize(DeviceId::Cuda(0))?;
    let t = Instant::now();
    let loader = Loader::from_dataset(data.clone(), batch, Some(1))?.workers(4).prefetch(4).progress(true).to::<G>()?;
    let mut losses = Vec::new();
    for (i, b) in loader.enumerate() {
        let _step = locus::range!("step {i}");
        losses.push(step(&b?)?);
    }
    let pipelined = t.elapsed().as_secs_f64();

    // Copy alone: the loader with no compute.
    let t = Instant::now();
    let loader = Loader::from_dataset(data.clone(), batch, Some(1))?.workers(4).prefetch(4).to::<G>()?;
    let on_device: Vec<Tensor<G>> = loader.collect::<Result<_, _>>()?;
    synchronize(DeviceId::Cuda(0))?;
    let copy_only = t.elapsed().as_secs_f64();

    // Compute alone: the same steps on batches already on the device.
    let t = Instant::now();
    for b in &on_device {
        step(b)?;
    }
    let compute_only = t.elapsed().as_secs_f64();
    if locus::trace::is_on() {
        println!("trace: {}", locus::trace::stop()?.display());
    }

    let ideal = copy_only.max(compute_only);
    println!(
        "{} batches of {batch} x {features} f32; mean loss {:.4}",
        losses.len(),
        losses.iter().sum::<f32>() / losses.len() as f32
    );
    println!(
        "loop {:.1} ms; copy alone {:.1} ms, compute alone {:.1} ms; loop / max(stage) = {:.2} (serial would be {:.2})",
        pipelined * 1e3,
        copy_only * 1e3,
        compute_only * 1e3,
        pipelined / ideal,
        (copy_only + compute_only) / ideal
    );
    Ok(())
}
