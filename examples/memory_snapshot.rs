//! Where did the GPU memory go? Records where each block is allocated, trains a small
//! model for a few steps, and writes a memory snapshot in PyTorch's format; PyTorch's
//! memory viewer renders it:
//!
//!     cargo run --release --example memory_snapshot -- memory.pickle
//!     python -m torch.cuda._memory_viz trace_plot memory.pickle -o memory.html
//!
//! (or drop the file on <https://pytorch.org/memory_viz>). An out-of-memory error names
//! the top allocation sites too; `LOCUS_OOM_SNAPSHOT=oom.pickle` writes the snapshot at
//! the error.

use locus::nn::{Linear, Module};
use locus::optim::AdamW;
use locus::{memory, Cuda, Device, Parameters, Tensor};

type G = Cuda<0>;

/// Two layers with a ReLU between.
#[derive(Parameters)]
struct Mlp<D: Device> {
    l1: Linear<D>,
    l2: Linear<D>,
}

fn main() -> locus::Result<()> {
    let path = std::env::args().nth(1).unwrap_or_else(|| "memory.pickle".into());
    memory::record_history(true);
    let (width, batch) = if locus::backend_name()? == "cuda" { (2048, 512) } else { (64, 16) };
    let mut mlp = Mlp { l1: Linear::<G>::new(width, width, 1)?, l2: Linear::<G>::new(width, 1, 2)? };
    let mut opt = AdamW::new(1e-3);
    for step in 0..5u64 {
        let x = Tensor::<G>::rand([batch, width], 100 + step)?;
        let loss = mlp.l2.forward(&mlp.l1.forward(&x)?.relu()?)?.square()?.mean()?;
        loss.backward()?;
        opt.step(&mut mlp)?;
        println!("step {step}: loss {:.4}", loss.item()?);
    }
    let snap = memory::snapshot()?;
    let live: usize = snap.blocks().iter().filter(|b| !b.cached).map(|b| b.requested).sum();
    println!("{} blocks, {live} bytes allocated", snap.blocks().len());
    snap.write(&path)?;
    println!("snapshot: {path}");
    Ok(())
}
