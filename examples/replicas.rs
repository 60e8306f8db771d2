//! A model replicated on every device, one thread per device: `#[derive(ToDevice)]`
//! copies it (PyTorch's `module.to(device)`), `#[on_device(dyn rank)]` makes each
//! thread's device current, and the `_current` factories follow it.
//!
//! Runs on a GPU machine, and anywhere else on the host backend:
//!     cargo run --release --example replicas

use locus::{current_device, on_device, Cpu, Device, DeviceId, Dyn, Tensor, ToDevice};

#[derive(ToDevice)]
struct Linear<D: Device> {
    weight: Tensor<D>,
    bias: Tensor<D>,
}

impl<D: Device> Linear<D> {
    fn forward(&self, x: &Tensor<D>) -> locus::Result<Tensor<D>> {
        (x.matmul(&self.weight)? + &self.bias)?.relu()
    }
}

/// One replica's step: its input is made on the current device, which the attribute
/// set from `rank`.
#[on_device(dyn rank)]
fn step(rank: u32, model: &Linear<Dyn>) -> locus::Result<(DeviceId, f32)> {
    let x = Tensor::<Dyn>::rand_current([4, 3], u64::from(rank))?;
    let y = model.forward(&x)?;
    Ok((current_device(), y.sum()?.item()?))
}

fn main() -> locus::Result<()> {
    let model = Linear::<Cpu> {
        weight: Tensor::from_vec(vec![0.5, -1.0, 1.0, 0.25, -0.5, 2.0], [3, 2])?,
        bias: Tensor::from_vec(vec![0.1, -0.1], [2])?,
    };
    let devices = locus::devices()?;
    let names: Vec<String> = devices.iter().map(ToString::to_string).collect();
    println!("backend: {}, devices: {}", locus::backend_name()?, names.join(", "));

    let results = std::thread::scope(|s| {
        let handles: Vec<_> = devices
            .iter()
            .map(|&id| {
                let model = &model;
                s.spawn(move || -> locus::Result<(DeviceId, f32)> {
                    let replica = model.to_dyn(id)?;
                    step(id.ordinal().unwrap_or(0), &replica)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a replica thread panicked")).collect::<Vec<_>>()
    });
    for r in results {
        let (device, sum) = r?;
        println!("replica on {device}: sum of relu(x @ w + b) = {sum:.4}");
    }
    Ok(())
}
