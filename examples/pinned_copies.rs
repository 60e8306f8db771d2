//! Host-to-device and device-to-host copies three ways: from pageable memory (staged
//! through the pinned pool), from pinned memory, and asynchronously from pinned memory
//! overlapping other work. Prints GB/s for each.
//!
//!     cargo run --release --example pinned_copies

use std::time::Instant;

use locus::{on_stream, pinned_stats, synchronize, Cpu, Cuda, DeviceId, Stream, Tensor};

type G = Cuda<0>;

fn gbps(bytes: usize, secs: f64) -> f64 {
    bytes as f64 / secs / 1e9
}

fn best_of(reps: usize, mut f: impl FnMut() -> locus::Result<()>) -> locus::Result<f64> {
    let mut best = f64::MAX;
    for _ in 0..reps {
        let t = Instant::now();
        f()?;
        best = best.min(t.elapsed().as_secs_f64());
    }
    Ok(best)
}

fn main() -> locus::Result<()> {
    println!("backend: {}", locus::backend_name()?);
    let mib = std::env::var("MIB").ok().and_then(|v| v.parse().ok()).unwrap_or(64usize);
    let bytes = mib << 20;
    let n = bytes / 4;
    let pageable = Tensor::<Cpu>::rand([n], 1)?;
    let pinned = pageable.pin_memory()?;
    let stream = Stream::<G>::new()?;

    let sync = || synchronize(DeviceId::Cuda(0));
    let h2d_pageable = best_of(5, || {
        let _d = pageable.to::<G>()?;
        sync()
    })?;
    let h2d_pinned = best_of(5, || {
        let _d = pinned.to_async(&stream)?.wait()?;
        Ok(())
    })?;
    let device = pageable.to::<G>()?;
    let d2h_pageable = best_of(5, || device.to::<Cpu>().map(drop))?;
    let d2h_pinned = best_of(5, || device.to_pinned_async(&stream)?.wait().map(drop))?;

    println!(
        "{mib} MiB host -> device: pageable {:.1} GB/s, pinned {:.1} GB/s",
        gbps(bytes, h2d_pageable),
        gbps(bytes, h2d_pinned)
    );
    println!(
        "{mib} MiB device -> host: pageable {:.1} GB/s, pinned {:.1} GB/s",
        gbps(bytes, d2h_pageable),
        gbps(bytes, d2h_pinned)
    );

    // Async: the copy of the next chunk overlaps the compute on the previous one.
    let chunks: Vec<Tensor<Cpu>> = (0..8).map(|i| Tensor::<Cpu>::full([n / 8], i as f32)).collect::<Result<_, _>>()?;
    let pinned_chunks: Vec<_> = chunks.iter().map(|c| c.pin_memory()).collect::<Result<_, _>>()?;
    let compute = Stream::<G>::new()?;
    let t = Instant::now();
    let transfers: Vec<_> = pinned_chunks.iter().map(|c| c.to_async(&stream)).collect::<Result<_, _>>()?;
    let sums: Vec<_> =
        transfers.iter().map(|tr| on_stream(&compute, || (tr.tensor() * 2.0)?.sum())).collect::<Result<_, _>>()?;
    let totals: Vec<f32> = sums.iter().map(|s| s.item()).collect::<Result<_, _>>()?;
    for tr in transfers {
        tr.wait()?;
    }
    println!(
        "async: 8 chunks copied and reduced on two streams in {:.2} ms; sums {:?}",
        t.elapsed().as_secs_f64() * 1e3,
        &totals[..3]
    );
    let st = pinned_stats();
    println!(
        "pinned pool: {} allocations, {} cache hits, {} MiB held",
        st.host_allocs,
        st.cache_hits,
        st.bytes_held >> 20
    );
    Ok(())
}
