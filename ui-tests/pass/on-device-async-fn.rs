// An async fn keeps its signature; its body runs with the device current at every poll,
// and its tail and returns coerce as in any async fn (`&String` to `&str`).
use std::future::Future;
use std::task::{Context, Poll, Waker};

use locus::{current_device, on_device, DeviceId};

#[on_device(0)]
async fn on_zero(x: &str) -> locus::Result<(DeviceId, usize)> {
    Ok((current_device(), x.len()))
}

#[on_device(dyn rank)]
async fn on_rank(rank: u32) -> DeviceId {
    current_device()
}

struct Named {
    name: String,
}

#[on_device(0)]
impl Named {
    async fn name(&self, early: bool) -> &str {
        if early {
            return &self.name;
        }
        &self.name
    }
}

fn block_on<T>(fut: impl Future<Output = T>) -> T {
    let mut fut = Box::pin(fut);
    let mut cx = Context::from_waker(Waker::noop());
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

fn main() -> locus::Result<()> {
    assert_eq!(block_on(on_zero("abc"))?, (DeviceId::Cuda(0), 3));
    assert_eq!(block_on(on_rank(0)), DeviceId::Cuda(0));
    let n = Named { name: "n".into() };
    assert_eq!(block_on(n.name(true)), "n");
    assert_eq!(block_on(n.name(false)), "n");
    assert_eq!(current_device(), DeviceId::Cpu);
    Ok(())
}
