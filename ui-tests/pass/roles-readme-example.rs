// The README's "Roles, not ordinals" example, as it is there.
use locus::{on_device, role, DeviceId, Tensor};

role!(pub Encoder, pub Decoder);

#[on_device(Encoder)]               // Encoder's device is current; `Here` is `Encoder`
fn encode(x: &Tensor<Here>) -> locus::Result<Tensor<Here>> {
    (x * 2.0)?.relu()
}

fn main() -> locus::Result<()> {
    // Once per process: in code, or `LOCUS_BIND=Encoder=cuda:1,Decoder=cuda:0`.
    locus::bind::<Encoder>(DeviceId::Cuda(0))?;
    locus::bind::<Decoder>(DeviceId::Cuda(0))?;
    let h = encode(&Tensor::<Encoder>::arange(-1.0, 3.0, 1.0)?)?;
    let d = h.to::<Decoder>()?;     // same device: no data moves, the type changes
    // `&h + &d` does not compile: tensors on `Encoder` and `Decoder` cannot be used in one op
    assert_eq!((&d + &d)?.to_vec()?, vec![0.0, 0.0, 4.0, 8.0]);
    Ok(())
}
