// Host data joins GPU math after an explicit copy, and comes back the same way.
use locus::{Cpu, Cuda, Pinned, Tensor};

fn main() -> locus::Result<()> {
    let x = Tensor::<Cuda<0>>::full([3], 2.0)?;
    let h = Tensor::<Cpu>::from_vec(vec![1.0, 2.0, 3.0], [3])?;
    let p = Tensor::<Pinned>::ones([3])?;
    let y = ((&x * &h.to::<Cuda<0>>()?)? + p.to::<Cuda<0>>()?)?;
    assert_eq!(y.to::<Cpu>()?.to_vec()?, vec![3.0, 5.0, 7.0]);
    Ok(())
}
