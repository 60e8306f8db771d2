//! Loading a safetensors checkpoint to `cuda:0`: the file (4 GiB of f32 by default,
//! `LOCUS_BENCH_CHECKPOINT_GIB` for another size) is written once to
//! `LOCUS_BENCH_CHECKPOINT` (default `/tmp/locus-bench-4GiB.safetensors`, the path
//! `torch_baseline.py` reads too) and then loaded with the page cache warm (the untimed
//! samples read it). A sample is the wall time of `load_safetensors::<Cuda<0>>` and a
//! device synchronize; the loaded tensors are dropped after the clock stops.

use std::path::PathBuf;
use std::time::Instant;

use locus::{AnyTensor, Cuda, Tensor};

use super::method::{ms, row, row_na, samples};
use super::{sync, G, GIB};

/// The shared path and size.
fn file() -> (PathBuf, usize) {
    let gib = std::env::var("LOCUS_BENCH_CHECKPOINT_GIB").ok().and_then(|v| v.parse().ok()).unwrap_or(4usize);
    let path =
        std::env::var("LOCUS_BENCH_CHECKPOINT").unwrap_or_else(|_| format!("/tmp/locus-bench-{gib}GiB.safetensors"));
    (PathBuf::from(path), gib)
}

/// `layer.NN.weight` [8192, 4096] f32 (128 MiB each) for the size, plus a [4096] bias
/// per layer, as a model's checkpoint has many large and many small tensors.
fn write(path: &PathBuf, gib: usize) -> locus::Result<()> {
    let layers = gib * GIB / (128 << 20);
    let mut list: Vec<(String, AnyTensor<Cuda<0>>)> = Vec::new();
    for i in 0..layers {
        list.push((format!("layer.{i:02}.weight"), Tensor::<G>::rand([8192, 4096], i as u64)?.into()));
        list.push((format!("layer.{i:02}.bias"), Tensor::<G>::rand([4096], 1000 + i as u64)?.into()));
    }
    locus::save_safetensors(path, list)
}

pub(crate) fn load() {
    let (path, gib) = file();
    let name = format!("checkpoint_load_{gib}GiB");
    let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
    if size < (gib * GIB) as u64 {
        if let Err(e) = write(&path, gib) {
            row_na(&name, "ms", &format!("could not write {}: {e}", path.display()));
            return;
        }
    }
    // The data first: the last layer's bias against the values it was made from.
    let check = locus::load_safetensors::<G>(&path).and_then(|ck| {
        let last = gib * GIB / (128 << 20) - 1;
        let got = ck.get::<f32>(&format!("layer.{last:02}.bias"))?.to_vec()?;
        Ok(got == Tensor::<G>::rand([4096], 1000 + last as u64)?.to_vec()?)
    });
    match check {
        Ok(true) => {}
        Ok(false) => return row_na(&name, "ms", "the loaded data differs from the written data"),
        Err(e) => return row_na(&name, "ms", &format!("load failed: {e}")),
    }
    let times = samples(|| {
        sync();
        let t = Instant::now();
        let ck = locus::load_safetensors::<G>(&path).unwrap();
        sync();
        let secs = t.elapsed().as_secs_f64();
        drop(ck);
        secs
    });
    let gbs = (size.max((gib * GIB) as u64) as f64) / super::method::median(&times) / 1e9;
    row(
        &name,
        &ms(&times),
        "ms",
        &format!(
            "load_safetensors::<Cuda<0>>(path) + synchronize, page cache warm, wall time ({gbs:.1} GB/s at the median)"
        ),
    );
}
