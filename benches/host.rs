//! Host-side benchmarks with criterion: what needs no GPU. The device guard (entering
//! the current device, and switching devices) and the dispatch overhead of a small op on
//! the host backend (everything from `&a + &b` to the backend call, with a 16-element
//! kernel that costs next to nothing).
//!
//!     LOCUS_BACKEND=host cargo bench --bench host

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use locus::{Cuda, DeviceGuard, DeviceId, Tensor};

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

criterion_group!(benches, guard, dispatch);
criterion_main!(benches);
