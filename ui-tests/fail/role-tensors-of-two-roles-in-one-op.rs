// Tensors of two roles never meet in an op, even when both roles are bound to one
// device: the conversion is explicit, `.to::<Decoder>()`, as between two GPUs.
use locus::{role, DeviceId, Tensor};

role!(Encoder, Decoder);

fn main() -> locus::Result<()> {
    locus::bind::<Encoder>(DeviceId::Cuda(0))?;
    locus::bind::<Decoder>(DeviceId::Cuda(0))?;
    let a = Tensor::<Encoder>::ones([4])?;
    let b = Tensor::<Decoder>::ones([4])?;
    let _ = (&a + &b)?;
    Ok(())
}
