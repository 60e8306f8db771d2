// The indices of `index_select` live where the table does (the doc example of
// `Tensor::index_select`).
use locus::{Cuda, Tensor};

fn main() -> locus::Result<()> {
    let table = Tensor::<Cuda<0>>::ones([4, 2])?;
    let ids = Tensor::<Cuda<1>, i32>::zeros([3])?;
    let _ = table.index_select(0, &ids)?;
    Ok(())
}
