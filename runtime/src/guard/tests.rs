//! Tests of the guard stack against the backend: which device the backend has current
//! after enters, out-of-order drops, forgotten guards and suspended futures, and how
//! many backend switches that took.

use std::future::Future;
use std::task::{Context, Poll};

use super::stack::{BACKEND_CURRENT, SWITCHES};
use super::{current_device, DeviceGuard, OnDevice};
use crate::device::DeviceId;
use crate::error::Error;

fn switches() -> usize {
    SWITCHES.with(|n| n.get())
}

#[test]
fn entering_the_current_device_makes_no_backend_call() {
    let before = switches();
    let outer = DeviceGuard::enter(DeviceId::Cuda(0)).unwrap();
    assert_eq!(switches(), before + 1);
    for _ in 0..10 {
        let _same = DeviceGuard::enter(DeviceId::Cuda(0)).unwrap();
    }
    assert_eq!(switches(), before + 1, "same-device guards must not switch");
    drop(outer);
    assert_eq!(switches(), before + 2, "leaving cuda:0 for cpu switches once");
}

fn on_fresh_thread(f: impl FnOnce() + Send + 'static) {
    std::thread::spawn(f).join().unwrap();
}

fn backend_current() -> DeviceId {
    BACKEND_CURRENT.with(|c| c.get())
}

/// A second device besides `cuda:0`: `cuda:1` where it exists, else pinned memory
/// (a host placement the guard enters the same way), so the tests run on one GPU.
fn second() -> DeviceId {
    if crate::testing::needs_devices_for(2, "cuda:1 (pinned memory stands in for it)").unwrap() {
        DeviceId::Cuda(1)
    } else {
        DeviceId::Pinned
    }
}

/// A device other than [`second`] and `cuda:0`.
fn third() -> DeviceId {
    if second() == DeviceId::Pinned {
        DeviceId::Cpu
    } else {
        DeviceId::Pinned
    }
}

#[test]
fn dropping_an_outer_guard_first_keeps_the_inner_one_current_without_a_switch() {
    on_fresh_thread(|| {
        let outer = DeviceGuard::enter(DeviceId::Cuda(0)).unwrap();
        let inner = DeviceGuard::enter(DeviceId::Pinned).unwrap();
        let before = switches();
        drop(outer);
        assert_eq!((current_device(), backend_current()), (DeviceId::Pinned, DeviceId::Pinned));
        assert_eq!(switches(), before, "the top did not change");
        drop(inner);
        assert_eq!((current_device(), backend_current()), (DeviceId::Cpu, DeviceId::Cpu));
    });
}

#[test]
fn a_forgotten_guard_stays_current_after_the_guard_below_it_goes() {
    on_fresh_thread(|| {
        let outer = DeviceGuard::enter(DeviceId::Pinned).unwrap();
        std::mem::forget(DeviceGuard::enter(DeviceId::Cuda(0)).unwrap());
        drop(outer);
        assert_eq!((current_device(), backend_current()), (DeviceId::Cuda(0), DeviceId::Cuda(0)));
    });
}

/// Random enters, drops and forgets against a model: the current device, and the
/// backend's, is that of the latest live guard.
#[test]
fn the_backend_follows_the_innermost_live_guard() {
    on_fresh_thread(|| {
        let devices = [DeviceId::Cpu, DeviceId::Pinned, DeviceId::Cuda(0), second()];
        let mut live: Vec<(DeviceId, Option<DeviceGuard>)> = Vec::new();
        let mut x = 0x9e37_79b9_7f4a_7c15_u64;
        for step in 0..5000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let owned: Vec<usize> = (0..live.len()).filter(|&j| live[j].1.is_some()).collect();
            match x % 8 {
                0..=3 => {
                    let d = devices[(x >> 8) as usize % 4];
                    live.push((d, Some(DeviceGuard::enter(d).unwrap())));
                }
                4..=6 if !owned.is_empty() => drop(live.remove(owned[(x >> 8) as usize % owned.len()])),
                7 if !owned.is_empty() && live.len() < 8 => {
                    std::mem::forget(live[owned[(x >> 8) as usize % owned.len()]].1.take())
                }
                _ => {}
            }
            let expected = live.last().map_or(DeviceId::Cpu, |(d, _)| *d);
            assert_eq!(current_device(), expected, "step {step}");
            assert_eq!(backend_current(), expected, "backend at step {step}");
        }
    });
}

#[test]
fn a_guard_held_across_polls_is_made_current_again_on_the_backend() {
    on_fresh_thread(|| {
        let mut seen = Vec::new();
        let mut fut = Box::pin(OnDevice::new(DeviceId::Cuda(0), async {
            let _inner = DeviceGuard::enter(second()).unwrap();
            let mut polled = false;
            std::future::poll_fn(|cx| {
                if std::mem::replace(&mut polled, true) {
                    Poll::Ready(())
                } else {
                    cx.waker().wake_by_ref();
                    Poll::Pending
                }
            })
            .await;
            backend_current()
        }));
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let _outside = DeviceGuard::enter(third()).unwrap();
        loop {
            let polled = fut.as_mut().poll(&mut cx);
            seen.push(backend_current());
            if let Poll::Ready(v) = polled {
                assert_eq!(v.unwrap(), second());
                break;
            }
        }
        assert_eq!(seen, vec![third(); 2]);
    });
}

#[test]
fn a_guard_a_future_returns_stays_current_after_it() {
    on_fresh_thread(|| {
        let mut fut = Box::pin(OnDevice::new(DeviceId::Cuda(0), async { DeviceGuard::enter(second()) }));
        let Poll::Ready(Ok(Ok(guard))) = fut.as_mut().poll(&mut Context::from_waker(std::task::Waker::noop())) else {
            panic!("an async block without awaits is ready at once")
        };
        assert_eq!((current_device(), backend_current()), (second(), second()));
        drop(guard);
        assert_eq!((current_device(), backend_current()), (DeviceId::Cpu, DeviceId::Cpu));
    });
}

#[test]
fn a_missing_device_leaves_the_stack_alone() {
    let err = DeviceGuard::enter(DeviceId::Cuda(4096)).unwrap_err();
    assert!(matches!(err, Error::NoSuchDevice { ordinal: 4096, .. }));
    assert_eq!(current_device(), DeviceId::Cpu);
}
