// A graph over a run-time number of inputs: a `Vec<&mut Tensor>`, lent to the closure as
// a `Vec<&Tensor>` and written through a `Vec<InputMut>`.
use locus::{Cuda, Graph, Stream, Tensor};

fn main() -> locus::Result<()> {
    let s = Stream::<Cuda<0>>::new()?;
    let mut parts: Vec<Tensor<Cuda<0>>> = (0..4).map(|i| Tensor::full([2], i as f32)).collect::<locus::Result<_>>()?;
    let mut g = Graph::capture(&s, parts.iter_mut().collect::<Vec<_>>(), |xs| {
        let mut total = (xs[0] * 1.0)?;
        for x in &xs[1..] {
            total = (&total + *x)?;
        }
        Ok(total)
    })?;
    assert_eq!(g.replay()?.to_vec()?, vec![6.0; 2]);
    for (i, mut input) in g.inputs_mut().into_iter().enumerate() {
        input.copy_from_slice(&[10.0 * i as f32; 2])?;
    }
    assert_eq!(g.replay()?.to_vec()?, vec![60.0; 2]);
    drop(g);
    parts.push(Tensor::zeros([2])?);
    assert_eq!(parts.len(), 5);
    Ok(())
}
