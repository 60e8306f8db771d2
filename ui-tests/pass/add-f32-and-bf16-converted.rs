// The fix for `fail/add-f32-and-bf16.rs`: convert one side first.
use locus::{bf16, Cuda, Tensor};

fn main() -> locus::Result<()> {
    let a = Tensor::<Cuda<0>>::ones([2])?;
    let b = Tensor::<Cuda<0>, bf16>::ones([2])?;
    let c = (&a + &b.to_dtype::<f32>()?)?;
    let d = (&a.to_dtype::<bf16>()? * &b)?;
    assert_eq!(c.to_vec()?, vec![2.0, 2.0]);
    assert_eq!(d.to_vec()?, vec![bf16::from_f32(1.0); 2]);
    Ok(())
}
