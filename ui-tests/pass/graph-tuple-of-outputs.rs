// A graph may return several outputs, of any element types: a tuple of tensors gives a
// tuple of `Output` views after each replay.
use locus::{Cuda, Graph, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let mut x = Tensor::<Cuda<0>>::from_vec(vec![1.0, -2.0, 3.0, -4.0], [2, 2])?;
    let mut n = Tensor::<Cuda<0>, i32>::from_vec(vec![1, 2], [2])?;
    let mut g = Graph::capture(&s, (&mut x, &mut n), |(x, n)| {
        let r = x.relu()?;
        Ok((r.sum_dim(0, false)?, r.sum()?, (n * 3)?))
    })?;
    let (cols, total, tripled) = g.replay()?;
    assert_eq!(cols.shape(), &[2]);
    assert_eq!(cols.to_vec()?, vec![4.0, 0.0]);
    assert_eq!(total.item()?, 4.0);
    assert_eq!(tripled.to_vec()?, vec![3, 6]);
    let (_, mut ni) = g.inputs_mut();
    ni.copy_from_slice(&[5, 7])?;
    let (_, _, tripled) = g.replay()?;
    assert_eq!(tripled.to_vec()?, vec![15, 21]);
    Ok(())
}
