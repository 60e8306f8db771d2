//! Guards dropped in any order: the current device is always that of the innermost
//! guard still alive (the most recently entered one not yet dropped), or cpu when none
//! is. A forgotten guard counts as alive for good.
//!
//! Each case runs on a thread of its own, so that a forgotten guard stays there.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use locus::{current_device, DeviceGuard, DeviceId, OnDevice};
use proptest::prelude::*;

fn on_fresh_thread<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    std::thread::spawn(f).join().unwrap()
}

/// The CUDA devices there are, up to two; cpu stands in for a missing `cuda:1`.
fn second_gpu() -> DeviceId {
    if locus::testing::needs_devices_for(2, "cuda:1 (cpu stands in for it)").unwrap() {
        DeviceId::Cuda(1)
    } else {
        DeviceId::Cpu
    }
}

#[test]
fn dropping_guards_out_of_order_keeps_the_innermost_live_one_current() {
    let one = second_gpu();
    on_fresh_thread(move || {
        let a = DeviceGuard::enter(DeviceId::Cuda(0)).unwrap();
        let b = DeviceGuard::enter(one).unwrap();
        drop(a);
        let c = DeviceGuard::enter(DeviceId::Cuda(0)).unwrap();
        let d = DeviceGuard::enter(one).unwrap();
        drop(b);
        assert_eq!(current_device(), one, "d, the innermost live guard, is on {one}");
        drop(d);
        assert_eq!(current_device(), DeviceId::Cuda(0), "then c");
        drop(c);
        assert_eq!(current_device(), DeviceId::Cpu);
    });
}

#[test]
fn a_forgotten_guard_stays_alive_and_does_not_disturb_later_guards() {
    let one = second_gpu();
    on_fresh_thread(move || {
        let a = DeviceGuard::enter(DeviceId::Cuda(0)).unwrap();
        std::mem::forget(DeviceGuard::enter(DeviceId::Pinned).unwrap());
        let c = DeviceGuard::enter(one).unwrap();
        drop(a);
        assert_eq!(current_device(), one, "c is alive and innermost");
        drop(c);
        assert_eq!(current_device(), DeviceId::Pinned, "the forgotten guard is alive for good");
        let d = DeviceGuard::enter(DeviceId::Cuda(0)).unwrap();
        assert_eq!(current_device(), DeviceId::Cuda(0));
        drop(d);
        assert_eq!(current_device(), DeviceId::Pinned);
    });
}

#[derive(Clone, Debug)]
enum Step {
    Enter(usize),
    /// Drops the live guard at this index (modulo their number), in entry order.
    Drop(usize),
    Forget(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0usize..4).prop_map(Step::Enter),
        3 => any::<usize>().prop_map(Step::Drop),
        1 => any::<usize>().prop_map(Step::Forget),
    ]
}

proptest! {
    #[test]
    fn the_current_device_is_that_of_the_latest_live_guard(steps in prop::collection::vec(step(), 1..40)) {
        let devices = [DeviceId::Cpu, DeviceId::Pinned, DeviceId::Cuda(0), second_gpu()];
        let failure = on_fresh_thread(move || -> Option<String> {
            // Live guards in the order they were entered; a forgotten one holds `None`.
            let mut live: Vec<(DeviceId, Option<DeviceGuard>)> = Vec::new();
            for (n, s) in steps.iter().enumerate() {
                match *s {
                    Step::Enter(d) => live.push((devices[d], Some(DeviceGuard::enter(devices[d]).unwrap()))),
                    Step::Drop(i) | Step::Forget(i) => {
                        // Only guards that still have an owner can be dropped or forgotten.
                        let owned: Vec<usize> = (0..live.len()).filter(|&j| live[j].1.is_some()).collect();
                        if owned.is_empty() {
                            continue;
                        }
                        let j = owned[i % owned.len()];
                        if matches!(s, Step::Drop(_)) {
                            live.remove(j);
                        } else {
                            std::mem::forget(live[j].1.take());
                        }
                    }
                }
                let expected = live.last().map_or(DeviceId::Cpu, |(d, _)| *d);
                if current_device() != expected {
                    return Some(format!("after step {n} of {steps:?}: current {} but expected {expected}", current_device()));
                }
            }
            None
        });
        prop_assert!(failure.is_none(), "{}", failure.unwrap_or_default());
    }
}

/// Pending once, then ready: a point where other futures get to run.
struct YieldOnce(bool);

impl Future for YieldOnce {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if std::mem::replace(&mut self.0, true) {
            Poll::Ready(())
        } else {
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }
}

#[test]
fn a_guard_held_across_an_await_is_current_in_its_future_only() {
    let one = second_gpu();
    on_fresh_thread(move || {
        let _outside = DeviceGuard::enter(DeviceId::Pinned).unwrap();
        let fut = OnDevice::new(DeviceId::Cuda(0), async move {
            let mut seen = vec![current_device()];
            let inner = DeviceGuard::enter(one).unwrap();
            YieldOnce(false).await;
            seen.push(current_device());
            YieldOnce(false).await;
            seen.push(current_device());
            drop(inner);
            seen.push(current_device());
            YieldOnce(false).await;
            seen.push(current_device());
            seen
        });
        let mut fut = Box::pin(fut);
        let mut cx = Context::from_waker(Waker::noop());
        let seen = loop {
            let polled = fut.as_mut().poll(&mut cx);
            assert_eq!(current_device(), DeviceId::Pinned, "between polls, the future's guards are left");
            if let Poll::Ready(v) = polled {
                break v.unwrap();
            }
        };
        assert_eq!(seen, vec![DeviceId::Cuda(0), one, one, DeviceId::Cuda(0), DeviceId::Cuda(0)]);
    });
}

#[test]
fn a_future_dropped_while_it_holds_a_guard_leaves_the_stack_alone() {
    let one = second_gpu();
    on_fresh_thread(move || {
        let outside = DeviceGuard::enter(DeviceId::Pinned).unwrap();
        let mut fut = Box::pin(OnDevice::new(DeviceId::Cuda(0), async move {
            let _inner = DeviceGuard::enter(one).unwrap();
            YieldOnce(false).await;
        }));
        assert!(fut.as_mut().poll(&mut Context::from_waker(Waker::noop())).is_pending());
        let later = DeviceGuard::enter(DeviceId::Cuda(0)).unwrap();
        drop(fut);
        assert_eq!(current_device(), DeviceId::Cuda(0));
        drop(later);
        assert_eq!(current_device(), DeviceId::Pinned);
        drop(outside);
        assert_eq!(current_device(), DeviceId::Cpu);
    });
}
