//! Gradients for PyTorch to check (issue 33): `gpu grads FILE` computes, on cuda:0, the
//! gradient of `Σ f(inputs) · r` for every case below (f64, random inputs and weights
//! `r`) and writes the inputs, `r` and the gradients to the safetensors FILE as
//! `{case}.in{k}`, `{case}.r`, `{case}.grad{k}`. `benches/torch_grads.py FILE` recomputes
//! each case with torch autograd on the same inputs and compares. The case names are the
//! contract between the two files: the script has the same table.

use locus::{AnyTensor, Cuda, Param, Tensor};

type T = Tensor<Cuda<0>, f64>;

fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        })
        .collect()
}

type Case = (&'static str, Vec<Vec<usize>>, bool, fn(&[&T]) -> locus::Result<T>);

fn cases() -> Vec<Case> {
    let s = |v: &[usize]| v.to_vec();
    vec![
        ("add_broadcast", vec![s(&[3, 1, 4]), s(&[2, 4])], false, |x| x[0] + x[1]),
        ("sub", vec![s(&[2, 3]), s(&[3])], false, |x| x[0] - x[1]),
        ("mul_broadcast", vec![s(&[4, 1]), s(&[1, 5])], false, |x| x[0] * x[1]),
        ("div", vec![s(&[2, 3]), s(&[2, 3])], true, |x| x[0] / x[1]),
        ("scalar_ops", vec![s(&[5])], true, |x| ((2.0 - x[0])? * 3.0)? / 2.0),
        ("rdiv", vec![s(&[5])], true, |x| 3.0 / x[0]),
        ("relu", vec![s(&[3, 4])], false, |x| x[0].relu()),
        ("abs", vec![s(&[3, 4])], false, |x| x[0].abs()),
        ("square", vec![s(&[3, 4])], false, |x| x[0].square()),
        ("sqrt", vec![s(&[3, 4])], true, |x| x[0].sqrt()),
        ("exp", vec![s(&[3, 4])], false, |x| x[0].exp()),
        ("log", vec![s(&[3, 4])], true, |x| x[0].log()),
        ("tanh", vec![s(&[3, 4])], false, |x| x[0].tanh()),
        ("sigmoid", vec![s(&[3, 4])], false, |x| x[0].sigmoid()),
        ("gelu", vec![s(&[3, 4])], false, |x| x[0].gelu()),
        ("gelu_tanh", vec![s(&[3, 4])], false, |x| x[0].gelu_tanh()),
        ("pow3", vec![s(&[3, 4])], false, |x| x[0].pow(3.0)),
        ("clamp", vec![s(&[3, 4])], false, |x| x[0].clamp(-0.5, 0.5)),
        ("matmul", vec![s(&[3, 4]), s(&[4, 5])], false, |x| x[0].matmul(x[1])),
        ("bmm", vec![s(&[2, 3, 4]), s(&[2, 4, 5])], false, |x| x[0].matmul(x[1])),
        ("matmul_shared_rhs", vec![s(&[2, 3, 4]), s(&[4, 5])], false, |x| x[0].matmul(x[1])),
        ("t", vec![s(&[3, 4])], false, |x| x[0].t()),
        ("transpose", vec![s(&[2, 3, 4])], false, |x| x[0].transpose(0, 2)),
        ("sum", vec![s(&[3, 4])], false, |x| x[0].sum()),
        ("sum_dim", vec![s(&[2, 3, 4])], false, |x| x[0].sum_dim(1, true)),
        ("mean", vec![s(&[3, 4])], false, |x| x[0].mean()),
        ("mean_dim", vec![s(&[2, 3, 4])], false, |x| x[0].mean_dim(2, false)),
        ("max", vec![s(&[3, 4])], false, |x| x[0].max()),
        ("max_dim", vec![s(&[3, 4])], false, |x| Ok(x[0].max_dim(1, false)?.0)),
        ("softmax", vec![s(&[3, 5])], false, |x| x[0].softmax(1)),
        ("log_softmax", vec![s(&[3, 5])], false, |x| x[0].log_softmax(0)),
        ("cross_entropy", vec![s(&[4, 5])], false, |x| {
            x[0].cross_entropy(&Tensor::<Cuda<0>, i32>::from_vec(vec![0, 4, 2, 2], [4])?)
        }),
        ("index_select", vec![s(&[4, 3])], false, |x| {
            x[0].index_select(0, &Tensor::<Cuda<0>, i32>::from_vec(vec![3, 0, 3, 1], [4])?)
        }),
        ("narrow", vec![s(&[4, 5])], false, |x| x[0].narrow(1, 1, 3)),
        ("select", vec![s(&[4, 5])], false, |x| x[0].select(0, 2)),
        ("cat_dim", vec![s(&[2, 3]), s(&[2, 2])], false, |x| x[0].cat_dim(x[1], 1)),
        ("stack", vec![s(&[2, 3]), s(&[2, 3])], false, |x| T::stack(&[x[0], x[1]], 1)),
        ("reshape", vec![s(&[3, 4])], false, |x| x[0].reshape([2, 6])),
        ("where", vec![s(&[2, 3]), s(&[3])], false, |x| {
            Tensor::where_(&Tensor::<Cuda<0>, u8>::from_vec(vec![1, 0, 1, 0, 0, 1], [2, 3])?, x[0], x[1])
        }),
        ("mlp", vec![s(&[4, 3]), s(&[3, 5]), s(&[5]), s(&[5, 2])], false, |x| {
            ((x[0].matmul(x[1])? + x[2])?.tanh()?.matmul(x[3])?).log_softmax(1)
        }),
    ]
}

/// Writes every case to `path`.
pub(crate) fn dump(path: &str) -> locus::Result<()> {
    let mut out: Vec<(String, AnyTensor<Cuda<0>>)> = Vec::new();
    for (k, (name, shapes, positive, f)) in cases().into_iter().enumerate() {
        let inputs: Vec<T> = shapes
            .iter()
            .enumerate()
            .map(|(i, shape)| {
                let n = shape.iter().product();
                let v: Vec<f64> = values(n, (k * 10 + i) as u64 + 1)
                    .into_iter()
                    .map(|v| if positive { v.abs() + 0.5 } else { v })
                    .collect();
                T::from_vec(v, shape)
            })
            .collect::<locus::Result<_>>()?;
        let params: Vec<Param<Cuda<0>, f64>> = inputs.iter().map(|t| Param::new(t.clone())).collect();
        let refs: Vec<&T> = params.iter().map(|p| &**p).collect();
        let y = f(&refs)?;
        let r = T::from_vec(values(y.numel(), 1000 + k as u64), y.shape())?;
        (&y * &r)?.sum()?.backward()?;
        for (i, (x, p)) in inputs.iter().zip(&params).enumerate() {
            out.push((format!("{name}.in{i}"), x.into()));
            let g = p.grad().map_or_else(|| T::zeros(x.shape()), Ok)?;
            out.push((format!("{name}.grad{i}"), g.into()));
        }
        out.push((format!("{name}.r"), r.into()));
    }
    locus::save_safetensors(path, out)?;
    println!("# wrote {} cases to {path}", cases().len());
    Ok(())
}
