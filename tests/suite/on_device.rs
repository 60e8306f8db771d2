//! The current-device guard and the code `#[on_device]` and `with_device!` generate:
//! restoring on every exit, nesting, one stack per thread, and async fns whose guard
//! follows every poll.
//!
//! Runs with any number of devices: what needs `cuda:1` is skipped, with its reason, on a
//! machine with one (an error under `LOCUS_EXPECT_DEVICES=2` or more).

use std::future::Future;
use std::panic::catch_unwind;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use locus::{current_device, on_device, with_device, Cuda, DeviceGuard, DeviceId, Error, Tensor};

fn two_devices(test: &str) -> bool {
    locus::testing::needs_devices_for(2, &format!("the cuda:1 part of {test}")).unwrap()
}

#[on_device(0)]
fn current_in_sync_fn() -> DeviceId {
    current_device()
}

#[on_device(0)]
fn returns_early(early: bool) -> DeviceId {
    if early {
        return current_device();
    }
    DeviceId::Pinned
}

#[on_device(0)]
fn fails_with_question_mark() -> locus::Result<Tensor<Here>> {
    assert_eq!(current_device(), DeviceId::Cuda(0));
    Tensor::<Here>::from_vec(vec![1.0], [2])
}

#[on_device(0)]
fn panics_inside() {
    assert_eq!(current_device(), DeviceId::Cuda(0));
    panic!("boom");
}

#[test]
fn guard_restores_on_return() {
    assert_eq!(current_in_sync_fn(), DeviceId::Cuda(0));
    assert_eq!(current_device(), DeviceId::Cpu);
    assert_eq!(returns_early(true), DeviceId::Cuda(0));
    assert_eq!(current_device(), DeviceId::Cpu);
    assert_eq!(returns_early(false), DeviceId::Pinned);
    assert_eq!(current_device(), DeviceId::Cpu);
}

#[test]
fn guard_restores_on_question_mark() {
    let err = fails_with_question_mark().unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "from_vec", .. }), "{err}");
    assert_eq!(current_device(), DeviceId::Cpu);
}

#[test]
fn guard_restores_on_panic() {
    let _outer = DeviceGuard::enter(DeviceId::Pinned).unwrap();
    let caught = catch_unwind(panics_inside);
    assert!(caught.is_err());
    assert_eq!(current_device(), DeviceId::Pinned);
}

#[on_device(5000)]
fn on_a_missing_device_result() -> locus::Result<u32> {
    Ok(1)
}

#[on_device(5000)]
fn on_a_missing_device_plain() -> u32 {
    1
}

#[derive(Debug)]
enum AppError {
    Locus(Error),
}

impl From<Error> for AppError {
    fn from(e: Error) -> Self {
        AppError::Locus(e)
    }
}

#[on_device(dyn ordinal)]
fn with_own_error(ordinal: u32) -> Result<DeviceId, AppError> {
    Ok(current_device())
}

#[test]
fn a_missing_device_is_an_err_in_result_fns_and_a_panic_naming_it_otherwise() {
    let err = on_a_missing_device_result().unwrap_err();
    assert!(matches!(err, Error::NoSuchDevice { ordinal: 5000, .. }), "{err}");
    let panic = catch_unwind(on_a_missing_device_plain).unwrap_err();
    let message = panic.downcast_ref::<String>().expect("a formatted panic message");
    assert!(message.contains("cuda:5000"), "{message}");
    assert!(message.contains("return a Result"), "{message}");
    assert_eq!(current_device(), DeviceId::Cpu);
    assert_eq!(with_own_error(0).unwrap(), DeviceId::Cuda(0));
    assert!(matches!(with_own_error(5000), Err(AppError::Locus(Error::NoSuchDevice { ordinal: 5000, .. }))));
}

#[on_device(dyn rank)]
fn nested_inner(rank: usize) -> locus::Result<DeviceId> {
    Ok(current_device())
}

#[on_device(dyn DeviceId::Pinned)]
fn nested_outer() -> locus::Result<Vec<DeviceId>> {
    let mut seen = vec![current_device(), nested_inner(0)?, current_device()];
    let inner = with_device!(0 => {
        let deeper = with_device!(dyn DeviceId::Cpu => current_device())?;
        (current_device(), deeper)
    })?;
    seen.extend([inner.0, inner.1, current_device()]);
    Ok(seen)
}

#[test]
fn nested_guards_restore_in_order() {
    use DeviceId::*;
    assert_eq!(nested_outer().unwrap(), vec![Pinned, Cuda(0), Pinned, Cuda(0), Cpu, Pinned]);
    assert_eq!(current_device(), Cpu);
}

#[test]
fn threads_have_independent_stacks() {
    let _main = DeviceGuard::enter(DeviceId::Cuda(0)).unwrap();
    let handles: Vec<_> = [DeviceId::Pinned, DeviceId::Cpu, DeviceId::Cuda(0)]
        .into_iter()
        .map(|id| {
            std::thread::spawn(move || {
                let before = current_device();
                let seen = DeviceGuard::run(id, || {
                    std::thread::yield_now();
                    current_device()
                })
                .unwrap();
                (before, seen, current_device())
            })
        })
        .collect();
    for (h, id) in handles.into_iter().zip([DeviceId::Pinned, DeviceId::Cpu, DeviceId::Cuda(0)]) {
        assert_eq!(h.join().unwrap(), (DeviceId::Cpu, id, DeviceId::Cpu));
    }
    assert_eq!(current_device(), DeviceId::Cuda(0));
}

#[on_device(N)]
fn replica<const N: usize>(x: &Tensor<Cuda<N>>) -> locus::Result<(DeviceId, Tensor<Cuda<N>>)> {
    Ok((current_device(), (x * 2.0)?))
}

#[test]
fn const_generic_fns_get_one_copy_per_device() -> locus::Result<()> {
    let (seen, y) = replica(&Tensor::<Cuda<0>>::ones([2])?)?;
    assert_eq!((seen, y.to_vec()?), (DeviceId::Cuda(0), vec![2.0, 2.0]));
    if two_devices("const_generic_fns_get_one_copy_per_device") {
        let (seen, y) = replica(&Tensor::<Cuda<1>>::full([1], 3.0)?)?;
        assert_eq!((seen, y.to_vec()?), (DeviceId::Cuda(1), vec![6.0]));
    }
    assert_eq!(current_device(), DeviceId::Cpu);
    Ok(())
}

struct Worker {
    rank: u32,
}

#[on_device(dyn self.rank)]
impl Worker {
    fn device(&self) -> DeviceId {
        current_device()
    }

    fn scaled(&self, x: f32) -> locus::Result<Vec<f32>> {
        let id = current_device();
        (&Tensor::<locus::Dyn>::full_on(locus::Dyn::new(id), [1], 1.0)? * x)?.to_vec()
    }

    #[on_device(dyn DeviceId::Pinned)]
    fn pinned(&self) -> DeviceId {
        current_device()
    }
}

struct Layer;

#[on_device(0)]
impl Layer {
    fn forward(&self, x: &Tensor<Here>) -> locus::Result<Tensor<Cuda<0>>> {
        assert_eq!(current_device(), DeviceId::Cuda(0));
        x.relu()
    }
}

#[test]
fn impl_blocks_guard_every_method() -> locus::Result<()> {
    let w = Worker { rank: 0 };
    assert_eq!(w.device(), DeviceId::Cuda(0));
    assert_eq!(w.scaled(4.0)?, vec![4.0]);
    assert_eq!(w.pinned(), DeviceId::Pinned, "a method's own attribute wins");
    let x = Tensor::<Cuda<0>>::from_vec(vec![-1.0, 2.0], [2])?;
    assert_eq!(Layer.forward(&x)?.to_vec()?, vec![0.0, 2.0]);
    assert_eq!(current_device(), DeviceId::Cpu);
    Ok(())
}

#[test]
fn with_device_blocks_and_closures() -> locus::Result<()> {
    assert_eq!(with_device!(0 => current_device())?, DeviceId::Cuda(0));
    let err = with_device!(5000 => current_device()).unwrap_err();
    assert!(matches!(err, Error::NoSuchDevice { ordinal: 5000, .. }));
    let err = with_device!(dyn -1 => current_device()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");

    let mut calls = 0;
    let mut on_zero = with_device!(0 => |x: f32| {
        calls += 1;
        (current_device(), x + 1.0)
    });
    assert_eq!(on_zero(1.0)?, (DeviceId::Cuda(0), 2.0));
    assert_eq!(on_zero(2.0)?, (DeviceId::Cuda(0), 3.0));
    drop(on_zero);
    assert_eq!(calls, 2);
    assert_eq!(current_device(), DeviceId::Cpu);

    let spawned = std::thread::spawn(with_device!(dyn DeviceId::Pinned => move || current_device()));
    assert_eq!(spawned.join().unwrap()?, DeviceId::Pinned);
    Ok(())
}

/// Pending once, then ready: a point where another future gets to run.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            Poll::Ready(())
        } else {
            self.0 = true;
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

#[on_device(dyn device)]
async fn record(device: DeviceId, steps: usize) -> Vec<DeviceId> {
    let mut seen = Vec::new();
    for _ in 0..steps {
        seen.push(current_device());
        YieldOnce(false).await;
    }
    seen.push(current_device());
    seen
}

#[on_device(5000)]
async fn async_on_a_missing_device() -> locus::Result<u32> {
    Ok(1)
}

/// Polls the futures in turn on this thread until all are done.
fn run_interleaved<T>(mut futures: Vec<Pin<Box<dyn Future<Output = T>>>>) -> Vec<T> {
    let mut cx = Context::from_waker(Waker::noop());
    let mut out: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    while out.iter().any(Option::is_none) {
        for (f, slot) in futures.iter_mut().zip(&mut out) {
            if slot.is_none() {
                if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                    *slot = Some(v);
                }
                // Between polls the guard of each future is left.
                assert_eq!(current_device(), DeviceId::Pinned);
            }
        }
    }
    out.into_iter().flatten().collect()
}

#[test]
fn interleaved_futures_each_see_their_own_device() {
    let _outside = DeviceGuard::enter(DeviceId::Pinned).unwrap();
    let other =
        if two_devices("interleaved_futures_each_see_their_own_device") { DeviceId::Cuda(1) } else { DeviceId::Cpu };
    let results = run_interleaved(vec![Box::pin(record(DeviceId::Cuda(0), 3)), Box::pin(record(other, 3))]);
    assert_eq!(results, vec![vec![DeviceId::Cuda(0); 4], vec![other; 4]]);

    let err = run_interleaved(vec![Box::pin(async_on_a_missing_device())]).remove(0).unwrap_err();
    assert!(matches!(err, Error::NoSuchDevice { ordinal: 5000, .. }));
}

#[test]
fn a_future_that_moves_threads_keeps_its_device() {
    let mut fut = Box::pin(record(DeviceId::Cuda(0), 2));
    let mut cx = Context::from_waker(Waker::noop());
    assert!(fut.as_mut().poll(&mut cx).is_pending());
    let seen = std::thread::spawn(move || {
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
                break v;
            }
            assert_eq!(current_device(), DeviceId::Cpu);
        }
    })
    .join()
    .unwrap();
    assert_eq!(seen, vec![DeviceId::Cuda(0); 3]);
}

#[test]
fn with_device_async_blocks_resolve_on_their_device() {
    let fut = with_device!(0 => async { current_device() });
    let results = run_interleaved_outside(fut);
    assert_eq!(results.unwrap(), DeviceId::Cuda(0));
}

fn run_interleaved_outside<T>(fut: impl Future<Output = T>) -> T {
    let mut fut = Box::pin(fut);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
    }
}
