// On an impl block every method runs on the device; a method's own attribute wins.
use locus::{current_device, on_device, Cuda, DeviceId, Tensor};

struct Model {
    weight: Tensor<Cuda<0>>,
}

#[on_device(0)]
impl Model {
    fn new() -> locus::Result<Self> {
        Ok(Model { weight: Tensor::<Here>::ones([2])? })
    }

    fn forward(&self, x: &Tensor<Here>) -> locus::Result<Tensor<Here>> {
        assert_eq!(current_device(), DeviceId::Cuda(0));
        x * &self.weight
    }

    #[on_device(dyn DeviceId::Cpu)]
    fn on_host(&self) -> DeviceId {
        current_device()
    }

    const fn width() -> usize {
        2
    }
}

fn main() -> locus::Result<()> {
    let m = Model::new()?;
    let y = m.forward(&Tensor::full([Model::width()], 3.0)?)?;
    assert_eq!(y.to_vec()?, vec![3.0, 3.0]);
    assert_eq!(m.on_host(), DeviceId::Cpu);
    Ok(())
}
