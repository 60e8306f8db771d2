// Dyn operands compile with any placement; the check moves to run time.
use locus::{Cpu, Cuda, Error, Tensor};

fn main() -> locus::Result<()> {
    let a = Tensor::<Cuda<0>>::ones([2])?;
    let b = Tensor::<Cpu>::ones([2])?.into_dyn();
    match &a + &b {
        Err(Error::DeviceMismatch { op: "add", .. }) => {}
        other => panic!("expected a device mismatch, got {other:?}"),
    }
    let c = (&a + &b.to::<Cuda<0>>()?)?;
    assert_eq!(c.to_vec()?, vec![2.0, 2.0]);
    Ok(())
}
