// Copying one operand to the other's GPU makes the add compile.
// With fewer than two devices it prints that it is skipped and returns (an error
// under LOCUS_EXPECT_DEVICES=2 or more).
use locus::{Cuda, Tensor};

fn main() -> locus::Result<()> {
    if !locus::testing::needs_devices(2)? {
        return Ok(());
    }
    let a = Tensor::<Cuda<0>>::ones([2])?;
    let b = Tensor::<Cuda<1>>::ones([2])?;
    let c = (&a + &b.to::<Cuda<0>>()?)?;
    assert_eq!(c.to_vec()?, vec![2.0, 2.0]);
    Ok(())
}
