// Roles bound at start-up (here in code; `LOCUS_BIND=Encoder=cuda:0,Decoder=cuda:0` does
// the same), then typed code as with `Cuda<N>`; moving between roles on one device moves
// no data.
use locus::{role, DeviceId, Tensor};

role!(Encoder, Decoder);

fn encode(x: &Tensor<Encoder>) -> locus::Result<Tensor<Encoder>> {
    (x * 2.0)?.relu()
}

fn main() -> locus::Result<()> {
    locus::bind::<Encoder>(DeviceId::Cuda(0))?;
    locus::bind::<Decoder>(DeviceId::Cuda(0))?;
    let h = encode(&Tensor::<Encoder>::arange(-1.0, 3.0, 1.0)?)?;
    let d = h.to::<Decoder>()?;
    assert_eq!((&d + &d)?.to_vec()?, vec![0.0, 0.0, 4.0, 8.0]);
    Ok(())
}
