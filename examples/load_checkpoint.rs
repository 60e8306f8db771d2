//! Writes a safetensors checkpoint (layers of f32 weights and biases, made on `cuda:0`),
//! then loads it back to `cuda:0` twice, once cold from the writer's page cache and once
//! warm, with a progress bar, prints GB/s and checks every tensor against the original.
//!
//!     cargo run --release --example load_checkpoint
//!     CHECKPOINT_MIB=4096 cargo run --release --example load_checkpoint    (4 GiB)
//!
//! The size defaults to 4 GiB on a GPU and 256 MiB on the host backend;
//! `CHECKPOINT_PATH` sets the file (default: the temp dir; it is removed at the end).

use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};
use locus::{AnyTensor, Cuda, DeviceId, Tensor};

type G = Cuda<0>;
/// One layer: a [2048, 4096] weight (32 MiB) and a [4096] bias.
const ROWS: usize = 2048;
const COLS: usize = 4096;

fn main() -> locus::Result<()> {
    let backend = locus::backend_name()?;
    println!("backend: {backend}");
    let default_mib = if backend == "cuda" { 4096 } else { 256 };
    let mib: usize = std::env::var("CHECKPOINT_MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(default_mib);
    let layers = (mib / 32).max(1);
    let path = std::env::var("CHECKPOINT_PATH").map(Into::into).unwrap_or_else(|_| {
        std::env::temp_dir().join(format!("locus-load-checkpoint-{}.safetensors", std::process::id()))
    });

    let mut originals: Vec<(String, AnyTensor<G>)> = Vec::new();
    for i in 0..layers {
        originals.push((format!("layer.{i:03}.weight"), Tensor::<G>::rand([ROWS, COLS], i as u64)?.into()));
        originals.push((format!("layer.{i:03}.bias"), Tensor::<G>::rand([COLS], 10_000 + i as u64)?.into()));
    }
    let t = Instant::now();
    locus::save_safetensors(&path, originals.clone())?;
    let bytes = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0) as f64;
    println!(
        "wrote {} ({:.2} GB, {} tensors) in {:.2} s",
        path.display(),
        bytes / 1e9,
        originals.len(),
        t.elapsed().as_secs_f64()
    );

    for pass in ["first load", "second load"] {
        let bar = ProgressBar::new(bytes as u64);
        if let Ok(style) = ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes}  {binary_bytes_per_sec}  {msg}")
        {
            bar.set_style(style);
        }
        bar.set_message(pass);
        locus::synchronize(DeviceId::Cuda(0))?;
        let t = Instant::now();
        let ck = locus::load_safetensors_with(G::default(), &path, |done, _| bar.set_position(done as u64))?;
        locus::synchronize(DeviceId::Cuda(0))?;
        let secs = t.elapsed().as_secs_f64();
        bar.finish_and_clear();
        println!(
            "{pass}: {} tensors, {:.2} GB in {:.3} s: {:.1} GB/s",
            ck.len(),
            bytes / 1e9,
            secs,
            bytes / secs / 1e9
        );

        // Every tensor, element for element.
        for (name, want) in &originals {
            let same = match (ck.get_any(name), want) {
                (Some(AnyTensor::F32(got)), AnyTensor::F32(want)) => got.to_vec()? == want.to_vec()?,
                _ => false,
            };
            if !same {
                let _ = std::fs::remove_file(&path);
                eprintln!("{name} differs from what was written");
                std::process::exit(1);
            }
        }
    }
    println!("every tensor matches what was written");
    if std::env::var("CHECKPOINT_PATH").is_err() {
        let _ = std::fs::remove_file(&path);
    }
    Ok(())
}
