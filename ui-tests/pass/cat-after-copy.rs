// Gathering pieces from two GPUs onto one: copy, then concatenate.
// With fewer than two devices it prints that it is skipped and returns.
use locus::{Cuda, Tensor};

fn main() -> locus::Result<()> {
    let n = locus::device_count()?;
    if n < 2 {
        eprintln!("skipped: needs 2 devices, found {n}");
        return Ok(());
    }
    let a = Tensor::<Cuda<0>>::zeros([1, 2])?;
    let b = Tensor::<Cuda<1>>::ones([1, 2])?;
    let c = a.cat(&b.to::<Cuda<0>>()?)?;
    assert_eq!(c.shape(), &[2, 2]);
    Ok(())
}
