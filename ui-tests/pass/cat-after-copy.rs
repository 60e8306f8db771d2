// Gathering pieces from two GPUs onto one: copy, then concatenate.
// With fewer than two devices it prints that it is skipped and returns (an error
// under LOCUS_EXPECT_DEVICES=2 or more).
use locus::{Cuda, Tensor};

fn main() -> locus::Result<()> {
    if !locus::testing::needs_devices(2)? {
        return Ok(());
    }
    let a = Tensor::<Cuda<0>>::zeros([1, 2])?;
    let b = Tensor::<Cuda<1>>::ones([1, 2])?;
    let c = a.cat(&b.to::<Cuda<0>>()?)?;
    assert_eq!(c.shape(), &[2, 2]);
    Ok(())
}
