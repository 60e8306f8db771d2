//! Host-side benchmarks with criterion: what needs no GPU. The device guard (entering
//! the current device, and switching devices) and the dispatch overhead of a small op on
//! the host backend (everything from `&a + &b` to the backend call, with a 16-element
//! kernel that costs next to nothing). And host tensors at CPU speed (issue 23), each
//! beside its reference in the same run: f32 matmul against `matrixmultiply::sgemm` with
//! its threads, f32 add and sum of 16 Mi elements against a plain multi-threaded memcpy
//! that moves as many bytes (read plus written).
//!
//!     LOCUS_BACKEND=host cargo bench --bench host

use std::hint::black_box;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use locus::{Cpu, Cuda, DeviceGuard, DeviceId, Tensor};

fn guard(c: &mut Criterion) {
    let _outer = DeviceGuard::enter(DeviceId::Cuda(0)).expect("cuda:0 exists on every backend");
    c.bench_function("guard enter+exit, same device", |b| {
        b.iter(|| drop(black_box(DeviceGuard::enter(DeviceId::Cuda(0)))))
    });
    if locus::device_count().unwrap_or(0) >= 2 {
        c.bench_function("guard enter+exit, switching device", |b| {
            b.iter(|| drop(black_box(DeviceGuard::enter(DeviceId::Cuda(1)))))
        });
    }
}

fn dispatch(c: &mut Criterion) {
    let a = Tensor::<Cuda<0>>::ones([16]).expect("a 16-element tensor");
    let x = Tensor::<Cuda<0>>::ones([16]).expect("a 16-element tensor");
    c.bench_function("add of 16 elements, dispatch + host kernel", |b| b.iter(|| black_box(&a + &x)));
    let s = Tensor::<Cuda<0>>::ones([16]).expect("a 16-element tensor").into_dyn();
    c.bench_function("add of 16 elements, Dyn operand (run-time check)", |b| b.iter(|| black_box(&a + &s)));
}

fn matmul(c: &mut Criterion) {
    let mut g = c.benchmark_group("f32 matmul");
    g.sample_size(30).measurement_time(Duration::from_secs(8));
    for n in [256usize, 1024] {
        let a = Tensor::<Cpu>::rand([n, n], 1).expect("a");
        let b = Tensor::<Cpu>::rand([n, n], 2).expect("b");
        g.bench_with_input(BenchmarkId::new("locus Tensor<Cpu>::matmul", n), &n, |bch, _| {
            bch.iter(|| black_box(a.matmul(&b).expect("matmul")))
        });
        let (x, y) = (a.to_vec().expect("a"), b.to_vec().expect("b"));
        let mut out = vec![0f32; n * n];
        g.bench_with_input(BenchmarkId::new("matrixmultiply::sgemm (threading)", n), &n, |bch, _| {
            bch.iter(|| {
                // SAFETY: x, y and out hold n * n f32 each, row-major with row stride n.
                unsafe {
                    let (p, q, r, s) = (x.as_ptr(), y.as_ptr(), out.as_mut_ptr(), n as isize);
                    matrixmultiply::sgemm(n, n, n, 1.0, p, s, 1, q, s, 1, 0.0, r, s, 1);
                }
                black_box(&out);
            })
        });
    }
    g.finish();
}

/// Copies `src` into `dst` on every core, as one contiguous chunk per thread.
fn threaded_memcpy(dst: &mut [u8], src: &[u8]) {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let per = src.len().div_ceil(threads);
    std::thread::scope(|s| {
        for (d, from) in dst.chunks_mut(per).zip(src.chunks(per)) {
            s.spawn(move || d.copy_from_slice(from));
        }
    });
}

fn bandwidth(c: &mut Criterion) {
    const N: usize = 16 << 20;
    let mut g = c.benchmark_group("16 Mi f32");
    g.sample_size(10).measurement_time(Duration::from_secs(4));
    let a = Tensor::<Cpu>::rand([N], 1).expect("a");
    let b = Tensor::<Cpu>::rand([N], 2).expect("b");
    g.bench_function("locus add (3 x 64 MiB moved)", |bch| bch.iter(|| black_box((&a + &b).expect("add"))));
    g.bench_function("locus sum (64 MiB read)", |bch| bch.iter(|| black_box(a.sum().expect("sum"))));
    // The bound: a memcpy moving the same bytes (half read, half written), into memory
    // touched before.
    for (name, bytes) in
        [("memcpy 96 MiB (192 MiB moved, as add)", 96 << 20), ("memcpy 32 MiB (64 MiB moved, as sum)", 32 << 20)]
    {
        let src = vec![1u8; bytes];
        let mut dst = vec![0u8; bytes];
        g.bench_function(name, |bch| {
            bch.iter(|| {
                threaded_memcpy(&mut dst, &src);
                black_box(&dst);
            })
        });
    }
    g.finish();
}

criterion_group!(benches, guard, dispatch, matmul, bandwidth);
criterion_main!(benches);
