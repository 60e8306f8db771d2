// `DataParallel::new` takes the model by value (it keeps it, and replicates it again
// after every step); the old spelling passed a reference. The message names the fix; it
// shows once per bound that asks for it (the struct's and the fn's), as rustc reports them.
use locus::parallel::DataParallel;
use locus::{Cpu, Cuda, DeviceId, Tensor, ToDevice};

#[derive(ToDevice)]
struct Lin<D: locus::Device> {
    w: Tensor<D>,
}

fn main() -> locus::Result<()> {
    let model = Lin { w: Tensor::<Cuda<0>>::ones([2, 2])? };
    let _dp = DataParallel::new(&model, &[DeviceId::Cuda(0)], Cpu)?;
    Ok(())
}
