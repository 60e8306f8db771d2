//! Out of memory in the middle of a training step (issue 38 item 3, PyTorch's OOM
//! recovery): the step returns `Err(OutOfMemory)` with its report, everything the step
//! made is given back when its tensors drop, and the same step with a smaller batch then
//! runs. On the host backend the simulated device gets 32 MiB (a child process with
//! `LOCUS_HOST_DEVICE_MEMORY`) and a smaller model; on a GPU, the whole card.

use std::process::Command;

use locus::nn::{self, Linear, Module};
use locus::optim::Sgd;
use locus::{Cuda, Device, DeviceId, Error, Parameters, Tensor};

type G = Cuda<0>;
/// The input width and the hidden layer's (32× wider): smaller on the host backend,
/// whose matmuls run on the CPU.
fn dims() -> (usize, usize) {
    if std::env::var_os("LOCUS_OOM_CHILD").is_some() {
        (64, 2048)
    } else {
        (512, 16384)
    }
}

#[derive(Parameters)]
struct Mlp<D: Device> {
    up: Linear<D>,
    down: Linear<D>,
}

/// One SGD step on a batch of `rows`: the input, a 32× wider hidden layer, its backward.
fn step(mlp: &mut Mlp<G>, opt: &mut Sgd<G>, rows: usize) -> locus::Result<f32> {
    let x = Tensor::<G>::rand([rows, dims().0], rows as u64)?;
    let loss = mlp.down.forward(&mlp.up.forward(&x)?.relu()?)?.square()?.mean()?;
    loss.backward()?;
    opt.step(mlp)?;
    nn::zero_grad(mlp);
    loss.item()
}

#[test]
fn a_step_that_runs_out_of_memory_fails_cleanly_and_a_smaller_one_then_runs() -> locus::Result<()> {
    let child = std::env::var_os("LOCUS_OOM_CHILD").is_some();
    if locus::backend_name()? == "host" && !child {
        // The simulated device's default 16 GiB would be real host memory: 32 MiB here.
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_step_that_runs_out_of_memory_fails_cleanly_and_a_smaller_one_then_runs",
                "--nocapture",
            ])
            .env("LOCUS_OOM_CHILD", "1")
            .env("LOCUS_HOST_DEVICE_MEMORY", (32u64 << 20).to_string())
            .output()
            .unwrap();
        let log = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success() && log.contains("recovered"), "the child: {log}");
        return Ok(());
    }
    let dev = DeviceId::Cuda(0);
    let (input, wide) = dims();
    let mut mlp = Mlp { up: Linear::<G>::new(input, wide, 1)?, down: Linear::<G>::new(wide, 1, 2)? };
    let mut opt = Sgd::new(1e-3);
    // Doubling batches until one does not fit (a bound of 2^22 rows: 256 GiB of hidden
    // activations on a GPU, more than any card has).
    let (mut rows, mut fits) = (256usize, None);
    let failure = loop {
        assert!(rows <= 1 << 22, "no batch up to {rows} rows ran out of memory");
        let before = locus::memory_allocated(dev)?;
        locus::reset_peak_memory_stats(dev)?;
        match step(&mut mlp, &mut opt, rows) {
            Ok(loss) => {
                assert!(loss.is_finite());
                assert_eq!(locus::memory_allocated(dev)?, before, "a step leaves nothing behind");
                fits = Some(rows);
                rows *= 2;
            }
            Err(e @ Error::OutOfMemory { .. }) => {
                // Everything the failed step made is back: its tensors were dropped on the
                // way out, and the parameters' gradients are forgotten.
                nn::zero_grad(&mlp);
                let after = locus::memory_allocated(dev)?;
                let peak = locus::max_memory_allocated(dev)?;
                break (e, before, after, peak);
            }
            Err(e) => panic!("not out of memory at {rows} rows: {e}"),
        }
    };
    let (e, before, after, peak) = failure;
    let text = e.to_string();
    println!("{rows} rows: {text}");
    assert!(text.contains("allocated by tensors") && text.contains("reserved by locus"), "{text}");
    assert_eq!(after, before, "memory_allocated after the failed step");
    // Mid-step: the step had allocated at least its input before it failed.
    assert!(peak >= before + rows * input * 4, "the step got going before it failed: peak {peak}, before {before}");
    // The largest batch that fitted fits again; so does a small one.
    let fits = fits.expect("at least the first batch fits");
    for r in [fits, 256] {
        let loss = step(&mut mlp, &mut opt, r)?;
        assert!(loss.is_finite(), "{r} rows after the failure");
    }
    assert_eq!(locus::memory_allocated(dev)?, before);
    println!("recovered: {fits} rows fit, {rows} did not");
    Ok(())
}
