// A graph on a run-time device (`Dyn`) takes `Dyn` and static tensors alike: that they are
// on the stream's device is checked when it captures, as `Error::DeviceMismatch`.
use locus::{Cuda, DeviceId, Dyn, Error, Graph, Stream, Tensor};

fn main() -> locus::Result<()> {
    let cuda0 = "cuda:0".parse::<DeviceId>()?;
    let s = Stream::new_on(Dyn::new(cuda0))?;
    let mut x = Tensor::<Cuda<0>>::ones([3])?.into_dyn();
    let mut b = Tensor::<Cuda<0>>::full([3], 0.5)?;
    let mut g = Graph::capture(&s, (&mut x, &mut b), |(x, b)| x * b)?;
    assert_eq!(g.replay()?.to_vec()?, vec![0.5; 3]);
    g.inputs_mut().0.copy_from(&Tensor::<Cuda<0>>::full([3], 4.0)?.into_dyn())?;
    assert_eq!(g.replay()?.to_vec()?, vec![2.0; 3]);
    let mut host = Tensor::<Cuda<0>>::ones([3])?.to_dyn(DeviceId::Cpu)?;
    match Graph::capture(&s, &mut host, |h| h + 1.0) {
        Err(Error::DeviceMismatch { op: "Graph::capture", .. }) => {}
        other => panic!("expected a device mismatch, got {other:?}"),
    }
    Ok(())
}
