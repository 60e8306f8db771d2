// Generic code over one placement `D` combines its tensors with no extra bound.
use locus::{Cuda, Device, Tensor};

fn affine<D: Device>(x: &Tensor<D>, w: &Tensor<D>, b: &Tensor<D>) -> locus::Result<Tensor<D>> {
    (x.matmul(w)? + b)?.relu()
}

fn main() -> locus::Result<()> {
    let x = Tensor::<Cuda<0>>::ones([2, 3])?;
    let w = Tensor::<Cuda<0>>::full([3, 2], 0.5)?;
    let b = Tensor::<Cuda<0>>::from_vec(vec![-2.0, 1.0], [2])?;
    assert_eq!(affine(&x, &w, &b)?.to_vec()?, vec![0.0, 2.5, 0.0, 2.5]);
    Ok(())
}
