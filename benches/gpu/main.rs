//! GPU benchmarks of locus, with the ceilings of the same machine measured in the same
//! run. Prints one tab-separated line per row: `row  median  unit  note  min  max` (see
//! `method.rs` for the method every row follows); a row that cannot be measured here
//! prints `n/a`. `benches/compare.sh` joins this with `benches/torch_baseline.py` and the
//! C++ baseline `benches/cpp/baseline.cu` into one table.
//!
//!     LOCUS_BACKEND=cuda cargo bench --bench gpu [-- --quick]     (or the bundled binary)
//!     gpu pipeline                                                  (the pipeline rows alone)
//!     gpu checkpoint                                                (the checkpoint row alone)
//!     gpu copies                                                    (the copy rows alone)
//!     gpu train                                                     (the training and autograd rows alone)
//!     gpu train-tiny                                                (tiny_gpt's eager and graphed rows alone)
//!     gpu train-trace PATH [STEPS]                                  (tiny_gpt's eager steps traced)
//!     gpu train-graph-profile                                       (two graphed tiny_gpt replays, NVTX `replay`, for ncu)
//!     gpu breakdown                                                 (an op's and a replay's time in parts)
//!     gpu graph-raw                                                 (the raw graph rows, locus untouched)
//!     gpu graph-probe                                               (the raw graph after each stage of a process)
//!     gpu graph-probe-repeat                                        (the raw graph 30 times over, no locus)
//!     gpu graph-probe-kind KIND                                     (the raw graph after 20 allocations of one kind)
//!     gpu graph-probe-idle                                          (the raw graph after idle seconds once locus began)
//!     gpu grads FILE                                                (gradients for benches/torch_grads.py)
//!
//! Without the cuda backend it measures nothing and exits with status 1.

mod breakdown;
mod checkpoint;
mod grads;
mod graph;
mod graph_breakdown;
#[path = "../common/layer.rs"]
mod layer;
mod method;
mod raw;
/// The model of examples/tiny_gpt, for its training row.
#[allow(dead_code)]
#[path = "../../examples/tiny_gpt/model.rs"]
mod tiny_gpt_model;
mod train;

use std::time::Instant;

use layer::Layer;
use locus::parallel::{DataParallel, Module};
use locus::{
    kernel, on_stream, synchronize, with_float32_matmul_precision, Cpu, Cuda, Device, DeviceGuard, DeviceId,
    MatmulPrecision, Stream, Tensor,
};
use method::{gbs, median, ms, row, row_na, samples};

type G = Cuda<0>;
const GIB: usize = 1 << 30;
const MIB: usize = 1 << 20;

/// Seconds per sample of the work `f` queues on `s`, between two events recorded on `s`.
/// What `f` returns is dropped only after the second event completed, so that a value
/// whose drop waits on the host (a `Transfer`) adds no wait inside the timed span.
fn stream_time<R>(s: &Stream<G>, mut f: impl FnMut() -> R) -> Vec<f64> {
    s.synchronize().unwrap();
    samples(|| {
        let a = s.record_event().unwrap();
        let kept = f();
        let b = s.record_event().unwrap();
        b.synchronize().unwrap();
        drop(kept);
        a.elapsed(&b).unwrap().as_secs_f64()
    })
}

/// [`stream_time`] on device 0's default stream, where the ops below run.
fn gpu_time<R>(f: impl FnMut() -> R) -> Vec<f64> {
    stream_time(&Stream::<G>::default_stream().unwrap(), f)
}

/// Wall seconds per sample of `f`, which waits for its own work.
fn wall_time(mut f: impl FnMut()) -> Vec<f64> {
    samples(|| {
        let t = Instant::now();
        f();
        t.elapsed().as_secs_f64()
    })
}

fn sync() {
    synchronize(DeviceId::Cuda(0)).unwrap();
}

/// A size in the rows' names: `4KiB`, `64KiB`, `1MiB`, ...
fn size_name(bytes: usize) -> String {
    if bytes < MIB {
        format!("{}KiB", bytes >> 10)
    } else {
        format!("{}MiB", bytes / MIB)
    }
}

/// Pageable copies of the small sizes (issue 21), and the round trip of `item()`.
fn small_copies() {
    for size in [4 << 10, 64 << 10] {
        let name = size_name(size);
        let host = Tensor::<Cpu, u8>::full([size], 1).unwrap();
        let h2d = wall_time(|| {
            let d = host.to::<G>().unwrap();
            sync();
            drop(d);
        });
        let note = "Tensor<Cpu>::to::<Cuda<0>>() + synchronize, wall time";
        row(&format!("h2d_pageable_{name}"), &gbs(size as f64, &h2d), "GB/s", note);
        let dev = host.to::<G>().unwrap();
        let d2h = wall_time(|| drop(dev.to::<Cpu>().unwrap()));
        row(
            &format!("d2h_pageable_{name}"),
            &gbs(size as f64, &d2h),
            "GB/s",
            "Tensor<Cuda<0>>::to::<Cpu>(), wall time",
        );
    }
    forced_paths();
    // A 0-d result already on the device, read back: 100 calls a sample.
    let x = Tensor::<G>::ones([]).unwrap();
    sync();
    let t = wall_time(|| {
        for _ in 0..100 {
            std::hint::black_box(x.item().unwrap());
        }
    });
    let us: Vec<f64> = t.iter().map(|s| s * 1e6 / 100.0).collect();
    row("item_roundtrip", &us, "us", "item() of a 0-d f32 on cuda:0 (ready), wall time per call");
    // The same with each download path forced (the default takes the inline one).
    use locus::tuning::{default_download_paths, set_download_paths};
    for (path, (inline_min, staged_min)) in [("direct", (usize::MAX, usize::MAX)), ("inline", (0, usize::MAX))] {
        set_download_paths(inline_min, staged_min);
        let t = wall_time(|| {
            for _ in 0..100 {
                std::hint::black_box(x.item().unwrap());
            }
        });
        let us: Vec<f64> = t.iter().map(|s| s * 1e6 / 100.0).collect();
        let note = format!("item() of a 0-d f32 on cuda:0 (ready), {path} path forced, wall time per call");
        row(&format!("item_roundtrip_{path}"), &us, "us", &note);
    }
    let (inline_min, staged_min) = default_download_paths();
    set_download_paths(inline_min, staged_min);
}

/// Every way a pageable copy can go, forced at each size around the thresholds (issue
/// 21), both ways: direct (the driver stages), inline (one pinned block in pieces, on the
/// calling thread and the op's stream) and staged (the copy threads). The default
/// thresholds in `copy_paths.rs` are chosen from these rows. Then the inline path's knobs
/// at 1 and 4 MiB: piece size, helper threads and plain stores up, piece size down.
fn forced_paths() {
    use locus::tuning::{
        default_download_paths, default_inline_download_piece, default_inline_upload, default_pool_spin,
        default_upload_paths, set_download_paths, set_inline_download_piece, set_inline_upload, set_pool_spin,
        set_upload_paths, InlineUpload,
    };
    use std::time::Duration;
    let paths = [("direct", (usize::MAX, usize::MAX)), ("inline", (0, usize::MAX)), ("staged", (0, 0))];
    let h2d_note = |path: &str| format!("Tensor<Cpu>::to::<Cuda<0>>() + synchronize, {path} path forced, wall time");
    for size in [4 << 10, 16 << 10, 64 << 10, 128 << 10, 256 << 10, 512 << 10, MIB, 2 * MIB, 4 * MIB, 16 * MIB] {
        let name = size_name(size);
        let host = Tensor::<Cpu, u8>::full([size], 1).unwrap();
        for (path, (inline_min, staged_min)) in paths {
            set_upload_paths(inline_min, staged_min);
            let h2d = wall_time(|| {
                let d = host.to::<G>().unwrap();
                sync();
                drop(d);
            });
            row(&format!("h2d_pageable_{path}_{name}"), &gbs(size as f64, &h2d), "GB/s", &h2d_note(path));
        }
        let (inline_min, staged_min) = default_upload_paths();
        set_upload_paths(inline_min, staged_min);
        let dev = host.to::<G>().unwrap();
        sync();
        for (path, (inline_min, staged_min)) in paths {
            set_download_paths(inline_min, staged_min);
            let d2h = wall_time(|| drop(dev.to::<Cpu>().unwrap()));
            let note = format!("Tensor<Cuda<0>>::to::<Cpu>(), {path} path forced, wall time");
            row(&format!("d2h_pageable_{path}_{name}"), &gbs(size as f64, &d2h), "GB/s", &note);
            if size == MIB || size == 16 * MIB {
                // Into a new `Vec` (fresh pages where the allocator has none to reuse)
                // rather than a host tensor from the host cache.
                let d2h = wall_time(|| drop(dev.to_vec().unwrap()));
                let note = format!("Tensor<Cuda<0>>::to_vec(), {path} path forced, wall time");
                row(&format!("d2h_to_vec_{path}_{name}"), &gbs(size as f64, &d2h), "GB/s", &note);
            }
        }
        let (inline_min, staged_min) = default_download_paths();
        set_download_paths(inline_min, staged_min);
    }
    let default = default_inline_upload();
    for size in [MIB, 4 * MIB] {
        let name = size_name(size);
        let host = Tensor::<Cpu, u8>::full([size], 1).unwrap();
        set_upload_paths(0, usize::MAX);
        // Piece size by helper threads, with the pool threads' default watch; then the
        // default knobs with the pool threads sleeping at once (no watch) and with plain
        // stores.
        let spin = default_pool_spin();
        let mut knobs: Vec<(String, InlineUpload, Duration)> = Vec::new();
        for piece in [128 << 10, 256 << 10, 512 << 10] {
            for helpers in [0, 1, 2, 3, 4] {
                let label = format!("p{}_h{helpers}", size_name(piece));
                knobs.push((label, InlineUpload { piece, helpers, nontemporal: true }, spin));
            }
        }
        knobs.push(("nospin".into(), default, Duration::ZERO));
        knobs.push(("plain".into(), InlineUpload { nontemporal: false, ..default }, spin));
        for (label, k, spin) in knobs {
            set_inline_upload(k);
            set_pool_spin(spin);
            let h2d = wall_time(|| {
                let d = host.to::<G>().unwrap();
                sync();
                drop(d);
            });
            let note = format!(
                "inline path forced, pieces of {} B, {} helper thread(s), {} stores, pool watch {} us, + synchronize, wall time",
                k.piece,
                k.helpers,
                if k.nontemporal { "non-temporal" } else { "plain" },
                spin.as_micros()
            );
            row(&format!("h2d_pageable_inline_{label}_{name}"), &gbs(size as f64, &h2d), "GB/s", &note);
        }
        set_inline_upload(default);
        set_pool_spin(spin);
        let (inline_min, staged_min) = default_upload_paths();
        set_upload_paths(inline_min, staged_min);
        let dev = host.to::<G>().unwrap();
        sync();
        set_download_paths(0, usize::MAX);
        for piece in [64 << 10, 128 << 10, 256 << 10, 512 << 10] {
            set_inline_download_piece(piece);
            let d2h = wall_time(|| drop(dev.to::<Cpu>().unwrap()));
            let note = format!("Tensor<Cuda<0>>::to::<Cpu>(), inline path forced, pieces of {piece} B, wall time");
            let label = format!("p{}", size_name(piece));
            row(&format!("d2h_pageable_inline_{label}_{name}"), &gbs(size as f64, &d2h), "GB/s", &note);
        }
        set_inline_download_piece(default_inline_download_piece());
        let (inline_min, staged_min) = default_download_paths();
        set_download_paths(inline_min, staged_min);
    }
}

fn copies() {
    small_copies();
    for size in [MIB, 16 * MIB, 256 * MIB] {
        let mb = size / MIB;
        let host = Tensor::<Cpu, u8>::full([size], 1).unwrap();
        let h2d = wall_time(|| {
            let d = host.to::<G>().unwrap();
            sync();
            drop(d);
        });
        row(
            &format!("h2d_pageable_{mb}MiB"),
            &gbs(size as f64, &h2d),
            "GB/s",
            "Tensor<Cpu>::to::<Cuda<0>>() + synchronize, wall time",
        );
        let dev = host.to::<G>().unwrap();
        let d2h = wall_time(|| drop(dev.to::<Cpu>().unwrap()));
        row(
            &format!("d2h_pageable_{mb}MiB"),
            &gbs(size as f64, &d2h),
            "GB/s",
            "Tensor<Cuda<0>>::to::<Cpu>() (into a block of locus's host cache), wall time",
        );
        // Like for like with PyTorch (issue 35): into fresh memory (`to_vec`, a new `Vec`;
        // PyTorch's `d.to('cpu')`) and into one destination reused (`copy_to_slice`;
        // PyTorch's `out.copy_(d)`).
        let fresh = wall_time(|| drop(dev.to_vec().unwrap()));
        row(
            &format!("d2h_fresh_{mb}MiB"),
            &gbs(size as f64, &fresh),
            "GB/s",
            "Tensor::to_vec() (a new Vec), wall time",
        );
        let mut out = vec![0u8; size];
        let reused = wall_time(|| dev.copy_to_slice(&mut out).unwrap());
        row(
            &format!("d2h_reused_{mb}MiB"),
            &gbs(size as f64, &reused),
            "GB/s",
            "Tensor::copy_to_slice() into one pageable Vec reused, wall time",
        );
        let pinned = host.pin_memory().unwrap();
        let s = Stream::<G>::new().unwrap();
        let h2d = stream_time(&s, || pinned.to_async(&s).unwrap());
        row(
            &format!("h2d_pinned_{mb}MiB"),
            &gbs(size as f64, &h2d),
            "GB/s",
            "Tensor<Pinned>::to_async, events on its stream",
        );
        let d2h = stream_time(&s, || drop(dev.to_pinned_async(&s).unwrap()));
        row(
            &format!("d2h_pinned_{mb}MiB"),
            &gbs(size as f64, &d2h),
            "GB/s",
            "Tensor<Cuda<0>>::to_pinned_async, events on its stream",
        );
    }
}

/// `out = a + b` as a kernel of the user's, for `user_kernel_1k_submit`: the same work as
/// the built-in add of `small_add_1k_submit`, written into an existing tensor.
#[kernel(source = r#"
    extern "C" __global__ void add_1k(const float* a, const float* b, float* out, size_t n) {
        size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
        if (i < n) out[i] = a[i] + b[i];
    }
"#)]
fn add_1k<D: Device>(a: &Tensor<D>, b: &Tensor<D>, out: &mut Tensor<D>, n: usize);

/// The 1024-element add, batched like the launch floor (`raw::launch_floor`), as a
/// built-in op and as a `#[locus::kernel]` launch.
fn small_ops(raw: &raw::Raw) {
    let a = Tensor::<G>::rand([1024], 1).unwrap();
    let b = Tensor::<G>::rand([1024], 2).unwrap();
    let n = raw::LAUNCHES;
    let submit = add_submit(&a, &b);
    row("small_add_1k_submit", &submit, "us/op", "1024-element add, host time per op in a batch of 20000, no sync");
    small_add_over_floor(raw, &a, &b);
    small_add_traced(&a, &b);
    let mut out = Tensor::<G>::zeros([1024]).unwrap();
    // The first launch compiles the kernel: the warm-up samples take it.
    let user = samples(|| {
        sync();
        let t = Instant::now();
        for _ in 0..n {
            add_1k(&a, &b, &mut out, 1024).launch().unwrap();
        }
        let us = t.elapsed().as_secs_f64() / n as f64 * 1e6;
        sync();
        us
    });
    row(
        "user_kernel_1k_submit",
        &user,
        "us/op",
        "#[locus::kernel] add of 1024 elements into an existing tensor, host time per launch in a batch of 20000, no sync",
    );
    let synced = samples(|| {
        sync();
        let t = Instant::now();
        for _ in 0..n / 10 {
            drop((&a + &b).unwrap());
            sync();
        }
        t.elapsed().as_secs_f64() / (n / 10) as f64 * 1e6
    });
    row("small_add_1k_sync", &synced, "us/op", "1024-element add + synchronize, per op in a batch of 2000");
}

/// `small_add_1k_submit` and `small_add_1k_sync` over their launch floors with both in
/// one sample: the floor's batch (`raw::launch_floor`'s) and then locus's, back to back,
/// so that the two see the same machine state; each sample is the pair's ratio. The
/// floors at the start of the run and the adds later drift apart between processes (on
/// one machine the raw launch alone moved 3.4–4.4 µs from one process to the next, issue
/// 35), which the ratio of their medians carries and this one does not.
fn small_add_over_floor(raw: &raw::Raw, a: &Tensor<G>, b: &Tensor<G>) {
    let n = raw::LAUNCHES;
    let submit = samples(|| {
        raw.sync_ctx();
        let t = Instant::now();
        for _ in 0..n {
            raw.launch_empty();
        }
        let floor = t.elapsed().as_secs_f64();
        raw.sync_ctx();
        sync();
        let t = Instant::now();
        for _ in 0..n {
            drop((a + b).unwrap());
        }
        let ours = t.elapsed().as_secs_f64();
        sync();
        ours / floor
    });
    let note = "small_add_1k_submit / ceiling_launch_floor, both batches of 20000 in each sample, back to back";
    row("small_add_1k_submit_over_floor", &submit, "x", note);
    let synced = samples(|| {
        raw.sync_ctx();
        let t = Instant::now();
        for _ in 0..n / 10 {
            raw.launch_empty();
            cudarc::driver::result::ctx::synchronize().unwrap();
        }
        let floor = t.elapsed().as_secs_f64();
        sync();
        let t = Instant::now();
        for _ in 0..n / 10 {
            drop((a + b).unwrap());
            sync();
        }
        t.elapsed().as_secs_f64() / floor
    });
    let note = "small_add_1k_sync / ceiling_launch_floor_sync, both batches of 2000 in each sample, back to back";
    row("small_add_1k_sync_over_floor", &synced, "x", note);
}

/// The samples of `small_add_1k_submit`: host time per 1024-element add in a batch of
/// `raw::LAUNCHES`, no sync inside the batch.
fn add_submit(a: &Tensor<G>, b: &Tensor<G>) -> Vec<f64> {
    let n = raw::LAUNCHES;
    samples(|| {
        sync();
        let t = Instant::now();
        for _ in 0..n {
            drop((a + b).unwrap());
        }
        let us = t.elapsed().as_secs_f64() / n as f64 * 1e6;
        sync();
        us
    })
}

/// `small_add_1k_submit` while a trace is written (issue 37): what tracing costs an op
/// (two timing events on its stream, a slice for the collector to write), against the
/// same batch untraced.
fn small_add_traced(a: &Tensor<G>, b: &Tensor<G>) {
    let file = std::env::temp_dir().join(format!("locus-bench-trace-{}.json", std::process::id()));
    locus::trace::start(&file).unwrap();
    let traced = add_submit(a, b);
    locus::trace::stop().unwrap();
    std::fs::remove_file(&file).ok();
    row(
        "small_add_1k_submit_traced",
        &traced,
        "us/op",
        "small_add_1k_submit while a trace is written (LOCUS_TRACE): host time per op in a batch of 20000, no sync",
    );
}

/// Only the rows of `gpu trace`: the 1024-element add untraced and traced, and the raw
/// launch floor without and with two timing events a launch.
fn trace_rows() {
    let raw = raw::Raw::new();
    raw::launch_floor(&raw);
    raw::timed_launch_floor(&raw);
    let a = Tensor::<G>::rand([1024], 1).unwrap();
    let b = Tensor::<G>::rand([1024], 2).unwrap();
    let submit = add_submit(&a, &b);
    row("small_add_1k_submit", &submit, "us/op", "1024-element add, host time per op in a batch of 20000, no sync");
    small_add_traced(&a, &b);
}

fn large_ops() {
    let n = GIB / 4; // 256 Mi f32 = 1 GiB per tensor
    let a = Tensor::<G>::rand([n], 1).unwrap();
    let b = Tensor::<G>::rand([n], 2).unwrap();
    let bytes = (n * 4) as f64;
    let add = gpu_time(|| drop((&a + &b).unwrap()));
    row("large_add_1GiB", &gbs(3.0 * bytes, &add), "GB/s", "f32 add, 2 reads + 1 write");
    let mul = gpu_time(|| drop((&a * &b).unwrap()));
    row("large_mul_1GiB", &gbs(3.0 * bytes, &mul), "GB/s", "f32 mul, 2 reads + 1 write");
    let relu = gpu_time(|| drop(a.relu().unwrap()));
    row("large_relu_1GiB", &gbs(2.0 * bytes, &relu), "GB/s", "f32 relu, 1 read + 1 write");
    let sum = gpu_time(|| drop(a.sum().unwrap()));
    row("sum_1GiB", &gbs(bytes, &sum), "GB/s", "f32 sum of 256 Mi elements, 1 read");
    drop((a, b));
    let (a, b) = (a_bf16(1), a_bf16(2));
    let add = gpu_time(|| drop((&a + &b).unwrap()));
    row("large_add_1GiB_bf16", &gbs(3.0 * bytes, &add), "GB/s", "bf16 add of 512 Mi elements, 2 reads + 1 write");
}

/// 1 GiB of bf16 (512 Mi elements), uniform in [0, 1).
fn a_bf16(seed: u64) -> Tensor<G, locus::bf16> {
    Tensor::<G, locus::bf16>::rand([GIB / 2], seed).unwrap()
}

/// Softmax over the last dim of `[8192, 8192]` f32 and bf16 (a row per block, kept in registers): GB/s
/// of the one read and one write, as the memory-bound op it is.
fn softmax() {
    let n = 8192;
    let x = Tensor::<G>::rand([n, n], 3).unwrap();
    let bytes = 2.0 * (n * n * 4) as f64;
    let t = gpu_time(|| drop(x.softmax(1).unwrap()));
    row("softmax_8192x8192_f32", &gbs(bytes, &t), "GB/s", "f32 softmax over the last dim, 1 read + 1 write");
    drop(x);
    let x = Tensor::<G, locus::bf16>::rand([n, n], 4).unwrap();
    let t = gpu_time(|| drop(x.softmax(1).unwrap()));
    row("softmax_8192x8192_bf16", &gbs(bytes / 2.0, &t), "GB/s", "bf16 softmax over the last dim (f32 inside)");
}

fn matmul() {
    let n = 4096;
    let a = Tensor::<G>::rand([n, n], 1).unwrap();
    let b = Tensor::<G>::rand([n, n], 2).unwrap();
    let t = gpu_time(|| drop(a.matmul(&b).unwrap()));
    let tflops: Vec<f64> = t.iter().map(|t| 2.0 * (n as f64).powi(3) / t / 1e12).collect();
    row("matmul_4096_f32", &tflops, "TFLOP/s", "cuBLAS sgemm, no TF32");
    // TF32 tensor cores: f32 at MatmulPrecision::High (PyTorch's allow_tf32 = True).
    let n = 8192;
    let a = Tensor::<G>::rand([n, n], 3).unwrap();
    let b = Tensor::<G>::rand([n, n], 4).unwrap();
    let t = with_float32_matmul_precision(MatmulPrecision::High, || gpu_time(|| drop(a.matmul(&b).unwrap())));
    let tflops: Vec<f64> = t.iter().map(|t| 2.0 * (n as f64).powi(3) / t / 1e12).collect();
    row(
        "matmul_8192_tf32",
        &tflops,
        "TFLOP/s",
        "f32 at MatmulPrecision::High: cublasGemmEx, CUBLAS_COMPUTE_32F_FAST_TF32",
    );
    let a = Tensor::<G, locus::bf16>::rand([n, n], 5).unwrap();
    let b = Tensor::<G, locus::bf16>::rand([n, n], 6).unwrap();
    let t = gpu_time(|| drop(a.matmul(&b).unwrap()));
    let tflops: Vec<f64> = t.iter().map(|t| 2.0 * (n as f64).powi(3) / t / 1e12).collect();
    row("matmul_8192_bf16", &tflops, "TFLOP/s", "bf16: cublasGemmEx, CUDA_R_16BF, CUBLAS_COMPUTE_32F");
}

/// Nanoseconds per enter + exit of the guard of `to` from cuda:0, averaged over a batch
/// of `rounds`.
fn guard_pairs(to: DeviceId, rounds: u32) -> Vec<f64> {
    let _outer = DeviceGuard::enter(DeviceId::Cuda(0)).unwrap();
    samples(|| {
        let start = Instant::now();
        for _ in 0..rounds {
            drop(std::hint::black_box(DeviceGuard::enter(to).unwrap()));
        }
        start.elapsed().as_nanos() as f64 / rounds as f64
    })
}

fn guard() {
    row(
        "guard_enter_exit_same_device",
        &guard_pairs(DeviceId::Cuda(0), 2_000_000),
        "ns",
        "DeviceGuard::enter(cuda:0) + drop, cuda:0 already current, per pair in a batch of 2000000",
    );
    let name = "guard_enter_exit_switch_device";
    if locus::device_count().unwrap() >= 2 {
        let note = "DeviceGuard::enter(cuda:1) + drop from cuda:0, per pair in a batch of 200000";
        row(name, &guard_pairs(DeviceId::Cuda(1), 200_000), "ns", note);
    } else {
        row_na(name, "ns", "one GPU: no other device to switch to");
    }
}

fn pool_steady_state() {
    let s = Stream::<G>::new().unwrap();
    let src = Tensor::<Cpu>::rand([4 << 20], 3).unwrap();
    let step = || {
        let p = src.pin_memory().unwrap();
        let d = p.to_async(&s).unwrap().wait().unwrap();
        drop(d.to_pinned_async(&s).unwrap().wait().unwrap());
    };
    for _ in 0..3 {
        step();
    }
    let warm = locus::pinned_stats().host_allocs;
    for _ in 0..50 {
        step();
    }
    let new = locus::pinned_stats().host_allocs - warm;
    // A count, not a time: one value, so median, min and max agree.
    row(
        "pinned_pool_steady_allocs",
        &[new as f64],
        "allocs",
        "cuMemHostAlloc calls in 50 pin+H2D+D2H rounds after 3 warm-up rounds",
    );
}

/// A chunked H2D -> kernel -> D2H pipeline on three streams, against the ideal: the
/// slowest of its three stages, each run alone over all chunks the same way (everything
/// queued first, then waited for at the end, no host wait between chunks). 256 MiB in
/// chunks of `PIPELINE_CHUNK_MIB` (default 16). Every time is wall time from a
/// synchronized device until the last wait returns.
fn pipeline() {
    let mib = std::env::var("PIPELINE_CHUNK_MIB").ok().and_then(|v| v.parse().ok()).filter(|&m| (1..=256).contains(&m));
    let mib: usize = mib.unwrap_or(16);
    let (chunks, n) = (256 / mib, mib << 18); // f32 elements per chunk
    let srcs: Vec<_> = (0..chunks).map(|i| Tensor::<Cpu>::full([n], i as f32).unwrap().pin_memory().unwrap()).collect();
    let (h2d, comp, d2h) = (Stream::<G>::new().unwrap(), Stream::<G>::new().unwrap(), Stream::<G>::new().unwrap());
    let kernel = |x: &Tensor<G>| (x * 2.0).unwrap().relu().unwrap();
    let timed = |f: &dyn Fn()| {
        samples(|| {
            sync();
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
    };
    let piped = timed(&|| {
        // Each chunk's three steps are queued together, so its D2H can start as soon as
        // its kernel is done, while later chunks are still being queued.
        let (mut transfers, mut outs, mut back) = (Vec::new(), Vec::new(), Vec::new());
        for p in &srcs {
            let tr = p.to_async(&h2d).unwrap();
            let out = on_stream(&comp, || kernel(tr.tensor()));
            back.push(out.to_pinned_async(&d2h).unwrap());
            outs.push(out);
            transfers.push(tr);
        }
        for b in back {
            drop(b.wait().unwrap());
        }
        drop(transfers);
    });
    let on_dev: Vec<_> = srcs.iter().map(|p| p.to_async(&h2d).unwrap().wait().unwrap()).collect();
    let t_h2d = timed(&|| {
        let copies: Vec<_> = srcs.iter().map(|p| p.to_async(&h2d).unwrap()).collect();
        for c in copies {
            drop(c.wait().unwrap());
        }
    });
    let t_comp = timed(&|| {
        let outs: Vec<_> = on_dev.iter().map(|x| on_stream(&comp, || kernel(x))).collect();
        comp.synchronize().unwrap();
        drop(outs);
    });
    let t_d2h = timed(&|| {
        let back: Vec<_> = on_dev.iter().map(|x| x.to_pinned_async(&d2h).unwrap()).collect();
        for b in back {
            drop(b.wait().unwrap());
        }
    });
    // Both copies at once, no compute: the H2D and D2H of every chunk share the link (the
    // bidirectional ceiling is below twice one direction's), so the pipeline cannot beat this.
    let t_both = timed(&|| {
        let copies: Vec<_> = srcs.iter().map(|p| p.to_async(&h2d).unwrap()).collect();
        let back: Vec<_> = on_dev.iter().map(|x| x.to_pinned_async(&d2h).unwrap()).collect();
        for b in back {
            drop(b.wait().unwrap());
        }
        for c in copies {
            drop(c.wait().unwrap());
        }
    });
    let stages = [("H2D", &t_h2d), ("compute", &t_comp), ("D2H", &t_d2h), ("H2D and D2H at once", &t_both)];
    let (slowest, ideal) =
        stages.iter().map(|(name, t)| (*name, median(t))).fold(("", 0.0), |a, b| if b.1 > a.1 { b } else { a });
    let ratio: Vec<f64> = piped.iter().map(|t| t / ideal).collect();
    let note = format!(
        "{chunks} x {mib} MiB H2D->x*2,relu->D2H on 3 streams, over the slowest stage alone or both copies at once \
         ({slowest}, median {:.2} ms)",
        ideal * 1e3
    );
    row("pipeline_vs_ideal", &ratio, "x", &note);
    row("pipeline_ms", &ms(&piped), "ms", &format!("the pipeline of {chunks} x {mib} MiB, wall time"));
    let stage_note = |what| format!("{what} of all {chunks} chunks alone, queued together, waited for at the end");
    row("pipeline_stage_h2d_ms", &ms(&t_h2d), "ms", &stage_note("to_async"));
    row("pipeline_stage_compute_ms", &ms(&t_comp), "ms", &stage_note("x*2,relu"));
    row("pipeline_stage_d2h_ms", &ms(&t_d2h), "ms", &stage_note("to_pinned_async"));
    row(
        "pipeline_stage_both_copies_ms",
        &ms(&t_both),
        "ms",
        &format!("to_async and to_pinned_async of all {chunks} chunks at once on two streams, no compute, waited for at the end"),
    );
}

fn data_parallel() {
    let ids = locus::devices().unwrap();
    let dp = DataParallel::new(Layer { w: Tensor::<G>::rand([1024, 1024], 1).unwrap() }, &ids, Cuda::<0>).unwrap();
    let layer = dp.module();
    let x = Tensor::<G>::rand([8192, 1024], 2).unwrap();
    let parallel = wall_time(|| {
        drop(dp.forward(&x).unwrap());
        sync();
    });
    let note = format!(
        "relu([8192, 1024] @ [1024, 1024]) over {} GPU(s), gathered on cuda:0, + synchronize, wall time",
        ids.len()
    );
    row("data_parallel_forward", &ms(&parallel), "ms", &note);
    let plain = wall_time(|| {
        drop(layer.forward(&x).unwrap());
        sync();
    });
    let note = "the same layer's forward on cuda:0, no DataParallel, + synchronize, wall time";
    row("data_parallel_plain_forward", &ms(&plain), "ms", note);
}

/// A bench run on the raw side alone, before locus does anything in the process.
type RawRun = fn(&raw::Raw);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(at) = args.iter().position(|a| a == "grads") {
        // `gpu grads FILE`: the gradients benches/torch_grads.py checks (on any backend).
        let path = args.get(at + 1).map_or("grads.safetensors", String::as_str);
        grads::dump(path).unwrap();
        return;
    }
    if let Some(at) = args.iter().position(|a| a == "train-trace") {
        // `gpu train-trace PATH [STEPS]`: on any backend (the host backend's trace counts
        // the ops of a step; its times are the simulation's).
        let path = args.get(at + 1).map_or("tiny_gpt_trace.json", String::as_str);
        let steps = args.get(at + 2).and_then(|s| s.parse().ok()).unwrap_or(5);
        train::tiny_gpt_trace(path, steps).unwrap();
        return;
    }
    if let Some(at) = args.iter().position(|a| a == "graph-probe-kind") {
        // `gpu graph-probe-kind KIND`: the raw chain after each of 20 allocations of one kind.
        let kind = args.get(at + 1).map_or("", String::as_str);
        if !graph_breakdown::PROBE_KINDS.contains(&kind) {
            eprintln!("graph-probe-kind: no kind `{kind}`; one of {}", graph_breakdown::PROBE_KINDS.join(", "));
            std::process::exit(2);
        }
        println!("# row\tmedian\tunit\tnote\tmin\tmax");
        graph_breakdown::probe_kind(&raw::Raw::new(), kind);
        return;
    }
    // The raw chain's probes and rows, each a process of its own (see the list above).
    // `graph-raw` runs before locus does anything in the process (no backend, no context of
    // its own, no kernels loaded): whether the raw graph's device time above the C++ one
    // (issue 35) belongs to the process or to locus.
    let raw_runs: [(&str, RawRun); 5] = [
        ("graph-probe-adds", graph_breakdown::probe_adds),
        ("graph-probe-idle", graph_breakdown::probe_idle),
        ("graph-probe-repeat", graph_breakdown::probe_repeat),
        ("graph-probe", graph_breakdown::probe),
        ("graph-raw", graph_breakdown::rows_raw),
    ];
    if let Some((_, run)) = raw_runs.iter().find(|(name, _)| args.iter().any(|a| a == name)) {
        println!("# row\tmedian\tunit\tnote\tmin\tmax");
        run(&raw::Raw::new());
        return;
    }
    match locus::backend_name() {
        Ok("cuda") => {}
        other => {
            println!("# gpu bench: needs the cuda backend (got {other:?}); nothing measured");
            eprintln!("gpu bench: needs the cuda backend (got {other:?}); nothing measured");
            std::process::exit(1);
        }
    }
    method::set_quick(std::env::args().any(|a| a == "--quick"));
    // Touch device 0 through locus first so its context and kernels are ready.
    let _ = Tensor::<G>::ones([1]).unwrap().sum().unwrap().item().unwrap();
    println!("# row\tmedian\tunit\tnote\tmin\tmax");
    println!("# method: {} untimed then {} timed samples per row; median, min, max", method::warm(), method::reps());
    if std::env::args().any(|a| a == "pipeline") {
        pipeline(); // the pipeline rows alone: `gpu pipeline`
        return;
    }
    if std::env::args().any(|a| a == "copies") {
        copies(); // the copy rows alone: `gpu copies`
        return;
    }
    if std::env::args().any(|a| a == "train-tiny") {
        train::tiny_gpt(20).unwrap(); // tiny_gpt's two rows alone: `gpu train-tiny`
        train::tiny_gpt_graphed(20, false).unwrap();
        return;
    }
    if std::env::args().any(|a| a == "train-graph-profile") {
        train::tiny_gpt_graphed(0, true).unwrap(); // two graphed tiny_gpt replays in NVTX ranges `replay`
        return;
    }
    if std::env::args().any(|a| a == "train") {
        train::steps(); // the training rows alone: `gpu train`
        return;
    }
    if std::env::args().any(|a| a == "trace") {
        trace_rows(); // the tracing rows alone: `gpu trace`
        return;
    }
    if std::env::args().any(|a| a == "breakdown") {
        let raw = raw::Raw::new();
        breakdown::rows(&raw); // the breakdowns alone: `gpu breakdown`
        graph_breakdown::rows_all(&raw);
        return;
    }
    if let Some(at) = args.iter().position(|a| a == "breakdown-loop") {
        let (name, secs) = (args.get(at + 1).map_or("add_1k", String::as_str), args.get(at + 2));
        let secs = secs.and_then(|s| s.parse().ok()).unwrap_or(5.0);
        if let Err(e) = breakdown::profile_loop(&raw::Raw::new(), name, secs) {
            eprintln!("gpu breakdown-loop: {e}");
            std::process::exit(2);
        }
        return;
    }
    if std::env::args().any(|a| a == "checkpoint") {
        checkpoint::load(); // the checkpoint row alone: `gpu checkpoint`
        return;
    }
    let raw = raw::Raw::new(); // held to the end of the run
    raw::ceilings(&raw);
    copies();
    small_ops(&raw);
    breakdown::rows(&raw);
    graph::chain20();
    graph_breakdown::rows_all(&raw);
    large_ops();
    softmax();
    matmul();
    guard();
    pool_steady_state();
    pipeline();
    data_parallel();
    train::steps();
    checkpoint::load();
}
