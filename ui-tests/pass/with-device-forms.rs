// `with_device!` around a block, a closure and an async block, with each kind of device.
use locus::{current_device, with_device, Cuda, DeviceId, Tensor};

fn generic<const N: usize>() -> locus::Result<DeviceId> {
    with_device!(N => current_device())
}

fn main() -> locus::Result<()> {
    let t = with_device!(0 => {
        let t = Tensor::<Here>::ones([2])?;
        assert_eq!(current_device(), DeviceId::Cuda(0));
        t
    })?;
    let _: Tensor<Cuda<0>> = t;
    assert_eq!(generic::<0>()?, DeviceId::Cuda(0));
    let rank = 0u32;
    let f = with_device!(dyn rank => |x: u32| (current_device(), x * 2));
    assert_eq!(f(4)?, (DeviceId::Cuda(0), 8));
    let _fut = with_device!(0 => async { current_device() });
    assert_eq!(current_device(), DeviceId::Cpu);
    Ok(())
}
