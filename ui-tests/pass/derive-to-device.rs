// `#[derive(ToDevice)]` on a model with tensors, a nested model, a Vec and an Option.
use locus::{Cpu, Cuda, Device, Tensor, ToDevice};

#[derive(ToDevice)]
struct Linear<D: Device> {
    weight: Tensor<D>,
    bias: Option<Tensor<D>>,
}

#[derive(ToDevice)]
struct Mlp<D: Device> {
    layers: Vec<Linear<D>>,
    out: Linear<D>,
    name: String,
}

fn main() -> locus::Result<()> {
    let l = || -> locus::Result<Linear<Cpu>> { Ok(Linear { weight: Tensor::ones([2])?, bias: None }) };
    let m = Mlp { layers: vec![l()?, l()?], out: l()?, name: "mlp".into() };
    let g: Mlp<Cuda<0>> = m.to::<Cuda<0>>()?;
    assert_eq!(g.layers[1].weight.to_vec()?, vec![1.0, 1.0]);
    assert_eq!(g.out.weight.device().to_string(), "cuda:0");
    assert_eq!(g.name, "mlp");
    Ok(())
}
