// Code generic over `D: StaticDevice` takes roles; graphs and kernels of a role work as
// those of `Cuda<N>`.
use locus::{role, DeviceId, Graph, StaticDevice, Stream, Tensor};

role!(Stage0);

fn ones<D: StaticDevice>(n: usize) -> locus::Result<Tensor<D>> {
    Tensor::<D>::ones([n])
}

fn main() -> locus::Result<()> {
    locus::bind::<Stage0>(DeviceId::Cuda(0))?;
    let s = Stream::<Stage0>::new()?;
    let mut x = ones::<Stage0>(4)?;
    let mut g = Graph::capture(&s, &mut x, |x| x * 3.0)?;
    assert_eq!(g.replay()?.to_vec()?, vec![3.0; 4]);
    Ok(())
}
