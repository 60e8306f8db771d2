// `dyn` devices from a u32, a usize, an i32 or a DeviceId known at run time.
use locus::{current_device, on_device, DeviceId, Dyn, Tensor};

#[on_device(dyn rank)]
fn from_u32(rank: u32) -> DeviceId {
    current_device()
}

#[on_device(dyn index)]
fn from_usize(index: usize) -> DeviceId {
    current_device()
}

#[on_device(dyn id)]
fn zeros_here(id: DeviceId) -> locus::Result<Tensor<Dyn>> {
    Tensor::zeros_on(Dyn::new(current_device()), [2])
}

fn main() -> locus::Result<()> {
    assert_eq!(from_u32(0), DeviceId::Cuda(0));
    assert_eq!(from_usize(0), DeviceId::Cuda(0));
    assert_eq!(zeros_here("cuda:0".parse()?)?.device(), DeviceId::Cuda(0));
    assert_eq!(zeros_here(DeviceId::Pinned)?.device(), DeviceId::Pinned);
    Ok(())
}
