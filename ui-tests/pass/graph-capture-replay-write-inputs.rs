// The usual graph loop: capture once, then write new inputs through `inputs_mut()` and
// replay; outputs are read (or copied out) before the next replay; the inputs are the
// caller's again once the graph is dropped.
use locus::{Cuda, Graph, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let mut x = Tensor::<Cuda<0>>::ones([4])?;
    let mut w = Tensor::<Cuda<0>>::full([4], 2.0)?;
    let mut g = Graph::capture(&s, (&mut x, &mut w), |(x, w)| {
        let y = (x * w)?;
        (&y + x)?.relu()
    })?;
    assert_eq!(g.replay()?.to_vec()?, vec![3.0; 4]);
    let kept = g.outputs()?.to_tensor()?;
    for step in 1..4 {
        let (mut xi, mut wi) = g.inputs_mut();
        xi.copy_from_slice(&[step as f32; 4])?;
        wi.copy_from(&Tensor::<Cuda<0>>::full([4], -1.0)?)?;
        let y = g.replay()?;
        assert_eq!(y.to_vec()?, vec![0.0; 4]);
    }
    let other = Stream::<Cuda<0>>::new()?;
    assert_eq!(g.replay_on(&other)?.to_vec()?, vec![0.0; 4]);
    assert_eq!(kept.to_vec()?, vec![3.0; 4]);
    drop(g);
    assert_eq!(x.to_vec()?, vec![3.0; 4]);
    w = Tensor::<Cuda<0>>::zeros([4])?;
    assert_eq!(w.sum()?.item()?, 0.0);
    Ok(())
}
