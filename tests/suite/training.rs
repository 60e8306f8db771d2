//! Training blocks and optimizers (issue 33): SGD (momentum, Nesterov, weight decay) and
//! AdamW against plain-Rust f64 references of PyTorch's update rules over several steps,
//! gradient clipping, the cosine schedule, optimizer state saved and loaded by name and
//! moved with its model in one call, strict state-dict loads, `Linear`, `LayerNorm`,
//! `Dropout` and `Sequential`.

use locus::nn::{self, Dropout, LayerNorm, Linear, Module, Parameters, Sequential};
use locus::optim::{clip_grad_norm, AdamW, CosineWithWarmup, Sgd};
use locus::{Cpu, Cuda, DeviceId, Param, Tensor, ToDevice};

type G = Cuda<0>;

/// A model of one parameter `w`, whose loss `Σ c·w²/2` has the gradient `c·w`.
struct Quad<D: locus::Device> {
    w: Param<D, f64>,
}

impl<D: locus::Device> Parameters<D, f64> for Quad<D> {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Param<D, f64>)) {
        self.w.visit_params(&nn::join(prefix, "w"), f)
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Param<D, f64>)) {
        self.w.visit_params_mut(&nn::join(prefix, "w"), f)
    }
}

const C: [f64; 3] = [1.0, -2.0, 0.5];
const W0: [f64; 3] = [0.3, -0.7, 1.1];

fn backward(m: &Quad<G>) -> locus::Result<()> {
    m.w.zero_grad();
    let c = Tensor::<G, f64>::from_vec(C.to_vec(), [3])?;
    ((&m.w.square()? * &c)? * 0.5)?.sum()?.backward()
}

fn close(a: &[f64], b: &[f64], what: &str) {
    for (x, y) in a.iter().zip(b) {
        assert!((x - y).abs() <= 1e-12 * (1.0 + y.abs()), "{what}: {a:?} vs {b:?}");
    }
}

#[test]
fn sgd_matches_the_update_rule() -> locus::Result<()> {
    for (momentum, dampening, nesterov, wd) in
        [(0.0, 0.0, false, 0.0), (0.9, 0.0, false, 0.1), (0.9, 0.0, true, 0.01), (0.5, 0.3, false, 0.0)]
    {
        let mut m = Quad { w: Param::new(Tensor::<G, f64>::from_vec(W0.to_vec(), [3])?) };
        let mut opt = Sgd::new(0.1).momentum(momentum).dampening(dampening).nesterov(nesterov).weight_decay(wd);
        let (mut w, mut buf) = (W0.to_vec(), None::<Vec<f64>>);
        for step in 0..4 {
            backward(&m)?;
            opt.step(&mut m)?;
            let g: Vec<f64> = (0..3).map(|i| C[i] * w[i] + wd * w[i]).collect();
            let g = if momentum != 0.0 {
                let b: Vec<f64> = match &buf {
                    None => g.clone(),
                    Some(b) => (0..3).map(|i| momentum * b[i] + (1.0 - dampening) * g[i]).collect(),
                };
                let g = if nesterov { (0..3).map(|i| g[i] + momentum * b[i]).collect() } else { b.clone() };
                buf = Some(b);
                g
            } else {
                g
            };
            w = (0..3).map(|i| w[i] - 0.1 * g[i]).collect();
            close(&m.w.to_vec()?, &w, &format!("sgd m={momentum} n={nesterov} wd={wd} step {step}"));
        }
    }
    let bad = Sgd::<G, f64>::new(0.1).nesterov(true).step(&mut Quad { w: Param::new(Tensor::zeros([1])?) });
    assert!(bad.is_err(), "Nesterov without momentum is refused");
    Ok(())
}

#[test]
fn adamw_matches_the_update_rule() -> locus::Result<()> {
    let (lr, b1, b2, eps, wd) = (0.01, 0.8, 0.99, 1e-8, 0.1);
    let mut m = Quad { w: Param::new(Tensor::<G, f64>::from_vec(W0.to_vec(), [3])?) };
    let mut opt = AdamW::new(lr).betas(b1, b2).eps(eps).weight_decay(wd);
    let (mut w, mut mm, mut vv) = (W0.to_vec(), [0.0; 3], [0.0; 3]);
    for t in 1..=5 {
        backward(&m)?;
        opt.step(&mut m)?;
        for i in 0..3 {
            let g = C[i] * w[i];
            w[i] *= 1.0 - lr * wd;
            mm[i] = b1 * mm[i] + (1.0 - b1) * g;
            vv[i] = b2 * vv[i] + (1.0 - b2) * g * g;
            let (bc1, bc2) = (1.0 - b1.powi(t), 1.0 - b2.powi(t));
            w[i] -= lr / bc1 * mm[i] / (vv[i].sqrt() / bc2.sqrt() + eps);
        }
        close(&m.w.to_vec()?, &w, &format!("adamw step {t}"));
        assert_eq!(opt.steps_of("w"), t as u64);
    }
    // A parameter without a gradient is left alone and takes no step.
    m.w.zero_grad();
    let before = m.w.to_vec()?;
    opt.step(&mut m)?;
    assert_eq!(m.w.to_vec()?, before);
    assert_eq!(opt.steps_of("w"), 5);
    Ok(())
}

#[test]
fn clipping_scales_only_above_the_norm() -> locus::Result<()> {
    let m = Quad { w: Param::new(Tensor::<G, f64>::from_vec(W0.to_vec(), [3])?) };
    assert!(clip_grad_norm(&m, 1.0)?.is_none(), "no gradient, no norm");
    backward(&m)?;
    let g: Vec<f64> = (0..3).map(|i| C[i] * W0[i]).collect();
    let norm = g.iter().map(|x| x * x).sum::<f64>().sqrt();
    assert!((clip_grad_norm(&m, 10.0)?.unwrap().item()? - norm).abs() < 1e-12);
    close(&m.w.grad().unwrap().to_vec()?, &g, "under the limit: unchanged");
    clip_grad_norm(&m, 0.5)?;
    let k = 0.5 / (norm + 1e-6);
    close(&m.w.grad().unwrap().to_vec()?, &g.iter().map(|x| x * k).collect::<Vec<_>>(), "clipped");
    Ok(())
}

#[test]
fn the_schedule_warms_up_then_decays() {
    let s = CosineWithWarmup { peak: 1.0, floor: 0.0, warmup: 4, total: 14 };
    let lrs: Vec<f64> = (0..16).map(|k| s.lr(k)).collect();
    assert_eq!(&lrs[..4], &[0.25, 0.5, 0.75, 1.0]);
    assert!(lrs[4..14].windows(2).all(|w| w[1] < w[0]), "{lrs:?}");
    assert!((lrs[9] - 0.5).abs() < 1e-12);
    assert_eq!(lrs[15], 0.0);
}

/// Two linear layers with a tanh between: a model that moves (`ToDevice`).
struct Mlp<D: locus::Device> {
    l1: Linear<D>,
    l2: Linear<D>,
}

impl<D: locus::Device> Mlp<D> {
    fn forward(&self, x: &Tensor<D>) -> locus::Result<Tensor<D>> {
        self.l2.forward(&self.l1.forward(x)?.tanh()?)
    }
}

impl<D: locus::Device> Parameters<D> for Mlp<D> {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Param<D>)) {
        self.l1.visit_params(&nn::join(prefix, "l1"), f);
        self.l2.visit_params(&nn::join(prefix, "l2"), f);
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Param<D>)) {
        self.l1.visit_params_mut(&nn::join(prefix, "l1"), f);
        self.l2.visit_params_mut(&nn::join(prefix, "l2"), f);
    }
}

impl<D: locus::Device> ToDevice for Mlp<D> {
    type On<E: locus::Device> = Mlp<E>;
    fn to_placement<E: locus::Device>(&self, placement: E) -> locus::Result<Mlp<E>> {
        Ok(Mlp { l1: self.l1.to_placement(placement)?, l2: self.l2.to_placement(placement)? })
    }
}

fn mlp<D: locus::StaticDevice>(seed: u64) -> locus::Result<Mlp<D>> {
    Ok(Mlp { l1: Linear::new(3, 4, seed)?, l2: Linear::new(4, 1, seed + 1)? })
}

fn step<D: locus::StaticDevice>(model: &mut Mlp<D>, opt: &mut AdamW<D>) -> locus::Result<()> {
    nn::zero_grad(model);
    let x = Tensor::<D>::from_vec((0..6).map(|i| i as f32 / 6.0).collect(), [2, 3])?;
    model.forward(&x)?.square()?.mean()?.backward()?;
    opt.step(model)
}

fn trained_pair() -> locus::Result<(Mlp<G>, AdamW<G>)> {
    let (mut model, mut opt) = (mlp(1)?, AdamW::new(0.01));
    for _ in 0..2 {
        step(&mut model, &mut opt)?;
    }
    Ok((model, opt))
}

fn same_params<D: locus::Device, E: locus::Device>(a: &Mlp<D>, b: &Mlp<E>, tol: f32) -> locus::Result<()> {
    for ((n, x), (_, y)) in nn::named_parameters(a).into_iter().zip(nn::named_parameters(b)) {
        let (x, y) = (x.to_vec()?, y.to_vec()?);
        assert!(x.iter().zip(&y).all(|(p, q)| (p - q).abs() <= tol), "{n}: {x:?} vs {y:?}");
    }
    Ok(())
}

#[test]
fn optimizer_state_saves_and_loads_by_name() -> locus::Result<()> {
    let dir = std::env::temp_dir();
    let (model_path, opt_path) = (
        dir.join(format!("locus-train-model-{}.safetensors", std::process::id())),
        dir.join(format!("locus-train-opt-{}.safetensors", std::process::id())),
    );
    let (mut model, mut opt) = trained_pair()?;
    nn::save_state_dict(&model, &model_path)?;
    opt.save_state(&opt_path)?;
    let names: Vec<String> = locus::load_safetensors::<Cpu>(&opt_path)?.names().map(String::from).collect();
    assert!(
        names.contains(&"state.l1.weight.exp_avg".into()) && names.contains(&"state.l2.bias.step".into()),
        "{names:?}"
    );
    // A fresh model and optimizer loaded from the files continue exactly as the originals.
    let mut fresh = mlp::<G>(9)?;
    nn::load_state_dict(&mut fresh, &locus::load_safetensors::<G>(&model_path)?)?;
    let mut opt2 = AdamW::new(0.01);
    opt2.load_state(&locus::load_safetensors::<G>(&opt_path)?)?;
    step(&mut model, &mut opt)?;
    step(&mut fresh, &mut opt2)?;
    same_params(&model, &fresh, 0.0)?;
    // Without the optimizer state the step differs, so the comparison can fail.
    let mut lost = mlp::<G>(9)?;
    nn::load_state_dict(&mut lost, &locus::load_safetensors::<G>(&model_path)?)?;
    step(&mut lost, &mut AdamW::new(0.01))?;
    assert_ne!(nn::state_dict(&lost)[0].1.to_vec()?, nn::state_dict(&model)[0].1.to_vec()?);
    std::fs::remove_file(&model_path).ok();
    std::fs::remove_file(&opt_path).ok();
    Ok(())
}

#[test]
fn a_model_and_its_optimizer_move_in_one_call() -> locus::Result<()> {
    let (mut model, mut opt) = trained_pair()?;
    let (mut on_host, mut opt_host): (Mlp<Cpu>, AdamW<Cpu>) = (model.to::<G>()?, opt.to::<G>()?).to::<Cpu>()?;
    step(&mut model, &mut opt)?;
    step(&mut on_host, &mut opt_host)?;
    assert_eq!(nn::named_parameters(&on_host)[0].1.device(), DeviceId::Cpu);
    same_params(&model, &on_host, 1e-6)?;
    Ok(())
}

#[test]
fn a_strict_load_changes_nothing_on_error() -> locus::Result<()> {
    let path = std::env::temp_dir().join(format!("locus-train-strict-{}.safetensors", std::process::id()));
    let mut model = mlp::<G>(3)?;
    let before = nn::state_dict(&model)[0].1.to_vec()?;
    // A missing tensor, an extra one, a wrong shape.
    let w = Tensor::<G>::zeros([4, 3])?;
    let cases: [Vec<(&str, Tensor<G>)>; 3] = [
        vec![("l1.weight", w.clone())],
        nn::state_dict(&mlp::<G>(4)?)
            .into_iter()
            .map(|(n, t)| (if n == "l2.bias" { "l2.biass" } else { leak(n) }, t))
            .collect(),
        vec![("l1.weight", Tensor::zeros([3, 4])?)],
    ];
    for (k, list) in cases.into_iter().enumerate() {
        locus::save_safetensors(&path, list)?;
        let e = nn::load_state_dict(&mut model, &locus::load_safetensors::<G>(&path)?);
        assert!(e.is_err(), "case {k}");
        assert_eq!(nn::state_dict(&model)[0].1.to_vec()?, before, "case {k} changed a parameter");
    }
    std::fs::remove_file(&path).ok();
    Ok(())
}

fn leak(s: String) -> &'static str {
    Box::leak(s.into_boxed_str())
}

#[test]
fn blocks_compute_what_pytorch_does() -> locus::Result<()> {
    // Linear: x Wᵀ + b, for 2-d and batched 3-d inputs.
    let l = Linear::<G>::new(2, 3, 5)?;
    let x = Tensor::<G>::from_vec(vec![1.0, 2.0, -1.0, 0.5], [2, 2])?;
    let (w, b) = (l.weight.to_vec()?, l.bias.as_ref().unwrap().to_vec()?);
    assert!(w.iter().all(|v| v.abs() <= 1.0 / 2f32.sqrt()), "PyTorch's init range");
    let y = l.forward(&x)?.to_vec()?;
    let xs = x.to_vec()?;
    for r in 0..2 {
        for o in 0..3 {
            let want = xs[r * 2] * w[o * 2] + xs[r * 2 + 1] * w[o * 2 + 1] + b[o];
            assert!((y[r * 3 + o] - want).abs() < 1e-6);
        }
    }
    assert_eq!(l.forward(&Tensor::<G>::ones([4, 5, 2])?)?.shape(), &[4, 5, 3]);
    assert!(l.forward(&Tensor::<G>::ones([4, 3])?).is_err());
    // LayerNorm: rows of mean 0 and variance 1 (biased), then scaled and shifted.
    let mut norm = LayerNorm::<G>::new(4)?;
    norm.weight.set(Tensor::full([4], 2.0)?)?;
    norm.bias.set(Tensor::full([4], 1.0)?)?;
    let y = norm.forward(&Tensor::<G>::from_vec(vec![1.0, 2.0, 3.0, 4.0, 0.0, 0.0, 0.0, 8.0], [2, 4])?)?.to_vec()?;
    for row in y.chunks(4) {
        let z: Vec<f32> = row.iter().map(|v| (v - 1.0) / 2.0).collect();
        let mean = z.iter().sum::<f32>() / 4.0;
        let var = z.iter().map(|v| (v - mean).powi(2)).sum::<f32>() / 4.0;
        assert!(mean.abs() < 1e-5 && (var - 1.0).abs() < 1e-3, "{row:?}");
    }
    assert!(norm.forward(&Tensor::<G>::ones([2, 3])?).is_err());
    // Dropout: repeatable per seed and call, scaled, the identity in evaluation.
    let (d1, d2) = (Dropout::<G>::new(0.25, 7)?, Dropout::<G>::new(0.25, 7)?);
    let x = Tensor::<G>::ones([4000])?;
    let (a, b) = (d1.forward(&x)?.to_vec()?, d2.forward(&x)?.to_vec()?);
    assert_eq!(a, b);
    assert_ne!(a, d1.forward(&x)?.to_vec()?, "each call draws a new mask");
    assert!(a.iter().all(|v| *v == 0.0 || (*v - 4.0 / 3.0).abs() < 1e-6));
    let kept = a.iter().filter(|v| **v != 0.0).count();
    assert!((2800..3200).contains(&kept), "{kept}");
    assert!(Dropout::<G>::new(1.0, 0).is_err());
    // Sequential: names by position.
    let s = Sequential::<G>::new()
        .append(Linear::new(2, 2, 0)?)
        .append(nn::Relu::new())
        .append(Linear::new(2, 1, 1)?.without_bias());
    let names: Vec<String> = nn::named_parameters(&s).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["0.weight", "0.bias", "2.weight"]);
    Ok(())
}

/// The fused update (one kernel per parameter on cuda:0) against the same update as
/// tensor ops (on the host placement) for the 16-bit types: equal within a few of their
/// ulps (the kernel rounds once, the ops after each op).
fn fused_matches_ops<T: locus::Float>(tol: f64) -> locus::Result<()> {
    let w0: Vec<T> = W0.iter().chain(&C).map(|v| T::from_f64(*v)).collect();
    let run = |steps: usize| -> locus::Result<(Vec<T>, Vec<T>)> {
        let mut on_gpu = Param::new(Tensor::<G, T>::from_vec(w0.clone(), [6])?);
        let mut on_host = Param::new(Tensor::<Cpu, T>::from_vec(w0.clone(), [6])?);
        let (mut a, mut b) = (AdamW::<G, T>::new(0.01), AdamW::<Cpu, T>::new(0.01));
        let (mut sa, mut sb) = (Sgd::<G, T>::new(0.1).momentum(0.9), Sgd::<Cpu, T>::new(0.1).momentum(0.9));
        for k in 0..steps {
            on_gpu.zero_grad();
            on_gpu.square()?.sum()?.backward()?;
            on_host.zero_grad();
            on_host.square()?.sum()?.backward()?;
            if k % 2 == 0 {
                a.step(&mut on_gpu)?;
                b.step(&mut on_host)?;
            } else {
                sa.step(&mut on_gpu)?;
                sb.step(&mut on_host)?;
            }
        }
        Ok((on_gpu.to_vec()?, on_host.to_vec()?))
    };
    let (x, y) = run(6)?;
    for (p, q) in x.iter().zip(&y) {
        let (p, q) = (p.to_f64(), q.to_f64());
        assert!((p - q).abs() <= tol * (1.0 + q.abs()), "{}: {x:?} vs {y:?}", T::DTYPE);
    }
    Ok(())
}

#[test]
fn fused_updates_match_the_ops_in_every_float_type() -> locus::Result<()> {
    fused_matches_ops::<f32>(1e-6)?;
    fused_matches_ops::<f64>(1e-12)?;
    fused_matches_ops::<locus::bf16>(3e-2)?;
    fused_matches_ops::<locus::f16>(4e-3)
}

#[test]
fn linear_gradients_equal_those_of_the_same_ops_written_out() -> locus::Result<()> {
    for xshape in [vec![3, 4], vec![2, 3, 4]] {
        let layer = Linear::<G, f64>::new(4, 5, 3)?;
        let x = Param::new(Tensor::<G, f64>::rand(&xshape, 4)?);
        let r = Tensor::<G, f64>::rand(layer.apply(&x)?.shape(), 5)?;
        (&layer.apply(&x)? * &r)?.sum()?.backward()?;
        let (w2, b2, x2) = (
            Param::new(layer.weight.detach()),
            Param::new(layer.bias.as_ref().unwrap().detach()),
            Param::new(x.detach()),
        );
        let y = (x2.matmul(&w2.t()?)? + &*b2)?;
        (&y * &r)?.sum()?.backward()?;
        for (a, b, what) in [
            (layer.weight.grad().unwrap(), w2.grad().unwrap(), "weight"),
            (layer.bias.as_ref().unwrap().grad().unwrap(), b2.grad().unwrap(), "bias"),
            (x.grad().unwrap(), x2.grad().unwrap(), "input"),
        ] {
            let (a, b) = (a.to_vec()?, b.to_vec()?);
            assert!(a.iter().zip(&b).all(|(p, q)| (p - q).abs() <= 1e-12), "{what} {xshape:?}: {a:?} vs {b:?}");
        }
    }
    Ok(())
}

/// The transposed GEMM operands (a `Linear`'s weight read as `Wᵀ`, the backward pass's
/// `Aᵀ g`) in every float type, against the product of explicit transposes.
fn transposed_operands<T: locus::Float>(tol: f64) -> locus::Result<()> {
    let layer = Linear::<G, T>::new(8, 6, 1)?.without_bias();
    let x = Param::new(Tensor::<G, f32>::rand([2, 5, 8], 2)?.to_dtype::<T>()?);
    let y = layer.apply(&x)?;
    y.sum()?.backward()?;
    let plain = x.detach().matmul(&layer.weight.detach().t()?)?;
    let close = |a: Vec<T>, b: Vec<T>, what: &str| {
        for (p, q) in a.iter().zip(&b) {
            let (p, q) = (p.to_f64(), q.to_f64());
            assert!((p - q).abs() <= tol * (1.0 + q.abs()), "{} {what}: {p} vs {q}", T::DTYPE);
        }
    };
    close(y.to_vec()?, plain.to_vec()?, "forward");
    // d(sum)/dW = Σ over rows of x; d(sum)/dx = Σ over outputs of W.
    let ones = Tensor::<G, T>::ones([2, 5, 6])?;
    let want_w = ones.reshape([10, 6])?.t()?.matmul(&x.detach().reshape([10, 8])?)?;
    close(layer.weight.grad().unwrap().to_vec()?, want_w.to_vec()?, "weight gradient");
    let want_x = ones.matmul(&layer.weight.detach())?;
    close(x.grad().unwrap().to_vec()?, want_x.to_vec()?, "input gradient");
    Ok(())
}

#[test]
fn transposed_gemm_operands_in_every_float_type() -> locus::Result<()> {
    transposed_operands::<f32>(1e-5)?;
    transposed_operands::<f64>(1e-12)?;
    transposed_operands::<locus::bf16>(2e-2)?;
    transposed_operands::<locus::f16>(2e-3)
}

/// `Module` for the test MLP, so `DataParallel` can run it.
impl<D: locus::Device> Module<D> for Mlp<D> {
    fn forward(&self, x: &Tensor<D>) -> locus::Result<Tensor<D>> {
        Mlp::forward(self, x)
    }
}

#[test]
fn data_parallel_backward_sums_the_replicas_gradients_onto_the_module() -> locus::Result<()> {
    use locus::parallel::DataParallel;
    let ids = locus::devices()?;
    let x = Tensor::<G>::rand([7, 3], 11)?; // 7 rows: parts of 4 and 3 over two devices
    let t = Tensor::<G>::rand([7, 1], 12)?;
    // One device, no DataParallel.
    let single = mlp::<G>(5)?;
    (single.forward(&x)? - &t)?.square()?.mean()?.backward()?;
    // Every device: the same loss through DataParallel.
    let mut dp = DataParallel::new(mlp::<G>(5)?, &ids, Cuda::<0>)?;
    let loss = (dp.forward(&x)? - &t)?.square()?.mean()?;
    loss.backward()?;
    for ((n, a), (_, b)) in nn::named_parameters(&single).into_iter().zip(nn::named_parameters(dp.module())) {
        let g = b.grad().unwrap_or_else(|| panic!("{n}: DataParallel's backward left no gradient"));
        assert_eq!(g.device(), DeviceId::Cuda(0), "{n}");
        let (a, g) = (a.grad().unwrap().to_vec()?, g.to_vec()?);
        assert!(a.iter().zip(&g).all(|(p, q)| (p - q).abs() <= 1e-6 * (1.0 + p.abs())), "{n}: {a:?} vs {g:?}");
    }
    // A step, then the next forward runs on refreshed replicas and backward works again.
    let before = loss.item()?;
    let mut opt = AdamW::new(0.05);
    for _ in 0..20 {
        nn::zero_grad(dp.module());
        (dp.forward(&x)? - &t)?.square()?.mean()?.backward()?;
        opt.step(dp.module_mut())?;
    }
    assert!((dp.forward(&x)? - &t)?.square()?.mean()?.item()? < before / 4.0);
    Ok(())
}

/// Replicas typed to `(Cuda<0>, Cuda<1>)`, run by hand on typed shards: the gradients on
/// the module are the whole batch's, as with `DataParallel::forward`; a device list that
/// is not the replicas' is an `Err`.
#[test]
fn typed_replicas_train_like_the_module() -> locus::Result<()> {
    use locus::parallel::{scatter_sizes, DataParallel};
    if !locus::testing::needs_devices_for(2, "typed replicas on cuda:0 and cuda:1")? {
        return Ok(());
    }
    type G1 = Cuda<1>;
    let x = Tensor::<G>::rand([7, 3], 11)?;
    let t = Tensor::<G>::rand([7, 1], 12)?;
    let single = mlp::<G>(5)?;
    ((single.forward(&x)? - &t)?.square()?.sum()? * (1.0 / 7.0))?.backward()?;
    let dp = DataParallel::new(mlp::<G>(5)?, &[DeviceId::Cuda(0), DeviceId::Cuda(1)], Cuda::<0>)?;
    let (r0, r1): (Mlp<G>, Mlp<G1>) = dp.replicas_on((Cuda::<0>, Cuda::<1>))?;
    let (x0, x1) = scatter_sizes(&x, (Cuda::<0>, Cuda::<1>), &[4, 3])?;
    let (t0, t1) = scatter_sizes(&t, (Cuda::<0>, Cuda::<1>), &[4, 3])?;
    let s0 = (r0.forward(&x0)? - &t0)?.square()?.sum()?;
    let s1 = (r1.forward(&x1)? - &t1)?.square()?.sum()?;
    ((s0 + s1.to::<G>()?)? * (1.0 / 7.0))?.backward()?;
    for ((n, a), (_, b)) in nn::named_parameters(&single).into_iter().zip(nn::named_parameters(dp.module())) {
        let g = b.grad().unwrap_or_else(|| panic!("{n}: the typed replicas' backward left no gradient"));
        let (a, g) = (a.grad().unwrap().to_vec()?, g.to_vec()?);
        assert!(a.iter().zip(&g).all(|(p, q)| (p - q).abs() <= 1e-6 * (1.0 + p.abs())), "{n}: {a:?} vs {g:?}");
    }
    assert!(dp.replicas_on((Cuda::<1>, Cuda::<0>)).is_err());
    assert!(dp.replicas_on((Cuda::<0>,)).is_err());
    Ok(())
}

#[test]
fn the_grad_scaler_unscales_skips_overflowing_steps_and_adapts() -> locus::Result<()> {
    use locus::optim::GradScaler;
    let mut scaler = GradScaler::with(1024.0, 2.0, 0.5, 2)?;
    let mut m = Quad { w: Param::new(Tensor::<G, f64>::from_vec(W0.to_vec(), [3])?) };
    let mut opt = Sgd::new(0.1);
    let c = Tensor::<G, f64>::from_vec(C.to_vec(), [3])?;
    let loss_of = |m: &Quad<G>| -> locus::Result<Tensor<G, f64>> { ((&m.w.square()? * &c)? * 0.5)?.sum() };
    // A finite step: the unscaled gradient is the true one, and the step runs.
    m.w.zero_grad();
    let grads = scaler.backward(&loss_of(&m)?, &mut m)?.unscale()?;
    assert!(grads.is_finite());
    close(&grads.model().w.grad().unwrap().to_vec()?, &(0..3).map(|i| C[i] * W0[i]).collect::<Vec<_>>(), "unscaled");
    assert!(scaler.step(&mut opt, grads)?);
    let after_one = m.w.to_vec()?;
    assert_ne!(after_one, W0.to_vec());
    // A second good step doubles the scale (interval 2).
    m.w.zero_grad();
    let grads = scaler.backward(&loss_of(&m)?, &mut m)?.unscale()?;
    assert!(scaler.step(&mut opt, grads)?);
    assert_eq!(scaler.scale(), 2048.0);
    // An overflowing gradient: the step is skipped and the scale halves.
    let before = m.w.to_vec()?;
    m.w.zero_grad();
    let inf = (&m.w.square()? * f64::INFINITY)?.sum()?;
    let grads = scaler.backward(&inf, &mut m)?.unscale()?;
    assert!(!grads.is_finite());
    assert!(!scaler.step(&mut opt, grads)?);
    assert_eq!(m.w.to_vec()?, before, "a skipped step changes no weight");
    assert_eq!(scaler.scale(), 1024.0);
    assert!(GradScaler::with(0.0, 2.0, 0.5, 1).is_err());
    Ok(())
}

/// `autocast::<H>`: the product and its gradients are those of the explicit casts to `H`
/// and back, bit for bit; outside the scope, the exact f32 product.
fn autocast_is_the_explicit_casts<H: locus::HalfFloat + locus::Float>() -> locus::Result<()> {
    let layer = Linear::<G>::new(16, 8, 3)?;
    let x = Param::new(Tensor::<G>::rand([4, 16], 5)?);
    let y = locus::autocast::<H, _>(|| layer.apply(&x))?;
    let r = Tensor::<G>::rand([4, 8], 6)?;
    (&y * &r)?.sum()?.backward()?;
    let (w2, b2, x2) =
        (Param::new(layer.weight.detach()), Param::new(layer.bias.as_ref().unwrap().detach()), Param::new(x.detach()));
    let prod = x2.to_dtype::<H>()?.matmul(&w2.to_dtype::<H>()?.t()?)?.to_dtype::<f32>()?;
    let want = (prod + &*b2)?;
    (&want * &r)?.sum()?.backward()?;
    // Within one unit in the last place of `H`: the GEMM reads the weight transposed in
    // place where the reference copies it, which may change the order of the sums.
    let ulp = if H::DTYPE == locus::DType::BF16 { 1.0 / 128.0 } else { 1.0 / 1024.0 };
    let near = |a: Vec<f32>, b: Vec<f32>, what: &str| {
        let scale = b.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!(a.iter().zip(&b).all(|(p, q)| (p - q).abs() <= ulp * scale), "{} {what}: {a:?} vs {b:?}", H::DTYPE);
    };
    near(y.to_vec()?, want.to_vec()?, "forward");
    near(layer.weight.grad().unwrap().to_vec()?, w2.grad().unwrap().to_vec()?, "weight gradient");
    near(x.grad().unwrap().to_vec()?, x2.grad().unwrap().to_vec()?, "input gradient");
    let exact = layer.apply(&x.detach())?.to_vec()?;
    assert_ne!(exact, y.to_vec()?, "outside the scope the product is f32's (and differs)");
    Ok(())
}

#[test]
fn autocast_computes_products_in_the_half_type_forward_and_backward() -> locus::Result<()> {
    autocast_is_the_explicit_casts::<locus::bf16>()?;
    autocast_is_the_explicit_casts::<locus::f16>()
}

/// Batch `k` of the graphed-step tests: 4 rows of 3 inputs and their targets.
fn batch<D: locus::StaticDevice>(k: u64) -> locus::Result<(Tensor<D>, Tensor<D>)> {
    Ok((Tensor::<D>::rand([4, 3], 100 + k)?, Tensor::<D>::rand([4, 1], 200 + k)?))
}

fn mse<D: locus::Device>(m: &Mlp<D>, x: &Tensor<D>, y: &Tensor<D>) -> locus::Result<Tensor<D>> {
    (m.forward(x)? - y)?.square()?.mean()
}

/// A whole step (forward, backward, AdamW) captured once and replayed: the same losses
/// and weights as the eager steps, step by step, going on from two eager steps (the bias
/// corrections of steps 3, 4, ...) with the learning rate changed between replays; the
/// weights read while the step lives (on another stream than the replays) are the
/// replays' so far.
#[test]
fn a_graphed_step_takes_the_eager_steps() -> locus::Result<()> {
    graphed_and_eager(None)
}

/// The same with the gradients clipped inside the graph (to a norm they exceed).
#[test]
fn a_graphed_step_clips_as_the_eager_step_does() -> locus::Result<()> {
    graphed_and_eager(Some(0.05))
}

fn graphed_and_eager(clip: Option<f64>) -> locus::Result<()> {
    let stream = locus::Stream::<G>::new()?;
    let (mut eager, mut eager_opt) = trained_pair()?;
    let (mut model, mut opt) = trained_pair()?;
    let lr = |k: u64| 0.01 * (1.0 + k as f64 / 4.0);
    let (mut x, mut y) = (Tensor::<G>::zeros([4, 3])?, Tensor::<G>::zeros([4, 1])?);
    let inputs = (&mut x, &mut y);
    let mut graphed = match clip {
        None => locus::GraphedStep::capture(&stream, &mut model, &mut opt, inputs, |m, (x, y)| mse(m, x, y))?,
        Some(c) => {
            locus::GraphedStep::capture_clipped(&stream, &mut model, &mut opt, inputs, c, |m, (x, y)| mse(m, x, y))?
        }
    };
    let mut clipped = 0;
    for k in 0..10 {
        let (bx, by) = batch::<G>(k)?;
        nn::zero_grad(&eager);
        eager_opt.set_lr(lr(k));
        let want = mse(&eager, &bx, &by)?;
        want.backward()?;
        if let Some(c) = clip {
            clipped += usize::from(clip_grad_norm(&eager, c)?.unwrap().item()? > c as f32);
        }
        eager_opt.step(&mut eager)?;
        let (mut xi, mut yi) = graphed.inputs_mut();
        xi.copy_from(&bx)?;
        yi.copy_from(&by)?;
        graphed.set_lr(lr(k));
        let got = if k == 4 {
            // The weights, read on the default stream right after the replay is queued.
            graphed.replay()?;
            same_params(graphed.module(), &eager, 1e-6)?;
            graphed.loss()?.item()?
        } else {
            graphed.replay()?.item()?
        };
        let want = want.item()?;
        assert!((got - want).abs() <= 1e-6 * want.abs(), "step {k}: graphed loss {got}, eager {want}");
        if locus::backend_name()? == "host" {
            assert_eq!(got.to_bits(), want.to_bits(), "step {k}: the host runs the same arithmetic");
        }
    }
    assert_eq!(graphed.steps(), 12);
    drop(graphed);
    if clip.is_some() {
        assert!(clipped >= 5, "the norm was above the clip in {clipped} of 10 steps");
    }
    same_params(&model, &eager, 1e-6)?;
    assert_eq!(opt.steps_of("l1.weight"), 12);
    // The model and optimizer go on eagerly from where the replays left them.
    step(&mut model, &mut opt)?;
    step(&mut eager, &mut eager_opt)?;
    same_params(&model, &eager, 1e-6)
}

/// What a graphed step cannot capture is an `Err`, and the model trains eagerly after it:
/// a host read in the loss, and parameters that took different numbers of steps.
#[test]
fn a_graphed_step_that_cannot_be_captured_is_an_error() -> locus::Result<()> {
    let stream = locus::Stream::<G>::new()?;
    let (mut model, mut opt) = trained_pair()?;
    let (mut x, mut y) = (Tensor::<G>::zeros([4, 3])?, Tensor::<G>::zeros([4, 1])?);
    let r = locus::GraphedStep::capture(&stream, &mut model, &mut opt, (&mut x, &mut y), |m, (x, y)| {
        let l = mse(m, x, y)?;
        l.item()?;
        Ok(l)
    });
    assert!(matches!(r, Err(locus::Error::NotCapturable { .. })), "{r:?}");
    step(&mut model, &mut opt)?;
    // One eager step of `l2` alone: `l1` is a step behind.
    nn::zero_grad(&model);
    model.l2.forward(&Tensor::<G>::ones([2, 4])?)?.sum()?.backward()?;
    opt.step(&mut model)?;
    let r = locus::GraphedStep::capture(&stream, &mut model, &mut opt, (&mut x, &mut y), |m, (x, y)| mse(m, x, y));
    match r {
        Err(locus::Error::InvalidArgument { reason, .. }) => assert!(reason.contains("steps of"), "{reason}"),
        other => panic!("{other:?}"),
    }
    step(&mut model, &mut opt)
}

/// The MLP with a spare layer the loss never reads.
struct WithSpare {
    mlp: Mlp<G>,
    spare: Linear<G>,
}

impl Parameters<G> for WithSpare {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Param<G>)) {
        self.mlp.visit_params(&nn::join(prefix, "mlp"), f);
        self.spare.visit_params(&nn::join(prefix, "spare"), f);
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Param<G>)) {
        self.mlp.visit_params_mut(&nn::join(prefix, "mlp"), f);
        self.spare.visit_params_mut(&nn::join(prefix, "spare"), f);
    }
}

/// A parameter without a gradient in the captured pass is left alone by every replay, as
/// an eager AdamW step leaves it: its values and its step count do not change.
#[test]
fn a_graphed_step_leaves_a_parameter_without_gradient_alone() -> locus::Result<()> {
    let stream = locus::Stream::<G>::new()?;
    let mut opt = AdamW::new(0.01);
    let mut model = WithSpare { mlp: mlp(1)?, spare: Linear::new(4, 4, 9)? };
    let spare_before = model.spare.weight.to_vec()?;
    let (mut x, mut y) = (Tensor::<G>::zeros([4, 3])?, Tensor::<G>::zeros([4, 1])?);
    let mut graphed =
        locus::GraphedStep::capture(&stream, &mut model, &mut opt, (&mut x, &mut y), |m, (x, y)| mse(&m.mlp, x, y))?;
    for k in 0..3 {
        let (bx, by) = batch::<G>(k)?;
        let (mut xi, mut yi) = graphed.inputs_mut();
        xi.copy_from(&bx)?;
        yi.copy_from(&by)?;
        graphed.replay()?;
    }
    drop(graphed);
    assert_eq!(opt.steps_of("mlp.l1.weight"), 3);
    assert_eq!(opt.steps_of("spare.weight"), 0);
    assert_eq!(model.spare.weight.to_vec()?, spare_before);
    Ok(())
}

/// An embedding and a classifier over it: the indices of both `index_select` and
/// `cross_entropy` are a graphed step's inputs.
struct Tagger {
    emb: nn::Embedding<G>,
    head: Linear<G>,
}

impl Parameters<G> for Tagger {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Param<G>)) {
        self.emb.visit_params(&nn::join(prefix, "emb"), f);
        self.head.visit_params(&nn::join(prefix, "head"), f);
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Param<G>)) {
        self.emb.visit_params_mut(&nn::join(prefix, "emb"), f);
        self.head.visit_params_mut(&nn::join(prefix, "head"), f);
    }
}

fn tagger() -> locus::Result<Tagger> {
    Ok(Tagger { emb: nn::Embedding::new(8, 4, 3)?, head: Linear::new(4, 8, 4)? })
}

fn tagger_loss(m: &Tagger, ids: &Tensor<G, i32>, targets: &Tensor<G, i32>) -> locus::Result<Tensor<G>> {
    m.head.forward(&m.emb.forward(ids)?)?.cross_entropy(targets)
}

fn params_of(m: &Tagger) -> locus::Result<Vec<Vec<f32>>> {
    let mut all = Vec::new();
    m.visit_params("", &mut |_, p| all.push(p.tensor().clone()));
    all.iter().map(|t| t.to_vec()).collect()
}

/// A graphed step with an embedding and a cross-entropy (their indices in the inputs)
/// takes the eager steps; a batch with an index or a target out of range is the eager
/// op's error at `replay`, and the step does not run: the weights, the optimizer's count
/// and the last loss stay as they were, and the next good batch goes on from there.
#[test]
fn a_graphed_step_checks_its_input_indices_and_loses_nothing_on_a_bad_batch() -> locus::Result<()> {
    let stream = locus::Stream::<G>::new()?;
    let (mut eager, mut eager_opt) = (tagger()?, AdamW::new(0.05));
    let (mut model, mut opt) = (tagger()?, AdamW::new(0.05));
    let (mut ids, mut targets) = (Tensor::<G, i32>::zeros([6])?, Tensor::<G, i32>::zeros([6])?);
    let mut graphed =
        locus::GraphedStep::capture(&stream, &mut model, &mut opt, (&mut ids, &mut targets), |m, (i, t)| {
            tagger_loss(m, i, t)
        })?;
    let good = |k: i32| {
        ((0..6).map(|j| (j * 3 + k) % 8).collect::<Vec<_>>(), (0..6).map(|j| (j + 2 * k) % 8).collect::<Vec<_>>())
    };
    let (mut last, mut taken) = (f32::NAN, 0);
    for k in 0..6 {
        let (mut i, mut t) = good(k);
        let bad = k == 2 || k == 4;
        if k == 2 {
            i[3] = 8;
        }
        if k == 4 {
            t[5] = -1;
        }
        let (mut ii, mut ti) = graphed.inputs_mut();
        ii.copy_from_slice(&i)?;
        ti.copy_from_slice(&t)?;
        let (it, tt) = (Tensor::<G, i32>::from_vec(i, [6])?, Tensor::<G, i32>::from_vec(t, [6])?);
        if bad {
            let want = tagger_loss(&eager, &it, &tt).map(|_| ()).unwrap_err();
            let before = params_of(graphed.module())?;
            assert_eq!(graphed.replay().map(|_| ()).unwrap_err(), want, "batch {k}");
            assert_eq!(graphed.steps(), taken, "batch {k}: no step taken");
            assert_eq!(graphed.loss()?.item()?.to_bits(), last.to_bits(), "batch {k}: the last loss is kept");
            assert_eq!(params_of(graphed.module())?, before, "batch {k}: the weights are kept");
            continue;
        }
        nn::zero_grad(&eager);
        let want = tagger_loss(&eager, &it, &tt)?;
        want.backward()?;
        eager_opt.step(&mut eager)?;
        last = graphed.replay()?.item()?;
        taken += 1;
        let want = want.item()?;
        assert!((last - want).abs() <= 1e-6 * want.abs(), "batch {k}: graphed loss {last}, eager {want}");
    }
    assert_eq!(graphed.steps(), 4);
    drop(graphed);
    for (a, b) in params_of(&model)?.iter().flatten().zip(params_of(&eager)?.iter().flatten()) {
        assert!((a - b).abs() <= 1e-5 * (1.0 + b.abs()), "weights: {a} against {b}");
    }
    assert_eq!(opt.steps_of("emb.weight"), 4);
    Ok(())
}

/// examples/tiny_gpt's step (embedding, attention with a masked softmax, LayerNorm, GELU
/// MLP, cross-entropy, clipping, AdamW with weight decay) as one `GraphedStep`, its byte
/// ids, targets and mask the inputs: the eager steps' losses, on three batches (bit for
/// bit on the host backend, which runs the same arithmetic).
#[test]
fn tiny_gpt_as_a_graphed_step_takes_the_eager_steps() -> locus::Result<()> {
    use crate::tiny_gpt_model::{Gpt, BATCH, CONTEXT, VOCAB};
    let n = BATCH * CONTEXT;
    let loss_of = |m: &Gpt<G>, ids: &Tensor<G, i32>, next: &Tensor<G, i32>, mask: &Tensor<G>| {
        m.logits(ids, mask)?.reshape([n, VOCAB])?.cross_entropy(next)
    };
    let (mut eager, mut eager_opt) = (Gpt::new_on(G::default(), 5)?, AdamW::<G>::new(3e-3).weight_decay(0.01));
    let (mut model, mut opt) = (Gpt::new_on(G::default(), 5)?, AdamW::<G>::new(3e-3).weight_decay(0.01));
    let stream = locus::Stream::<G>::new()?;
    let (mut is, mut ts) = (Tensor::<G, i32>::zeros([BATCH, CONTEXT])?, Tensor::<G, i32>::zeros([n])?);
    let mut ms = model.mask().clone();
    let mut step = locus::GraphedStep::capture_clipped(
        &stream,
        &mut model,
        &mut opt,
        (&mut is, &mut ts, &mut ms),
        1.0,
        |m, (i, t, k)| loss_of(m, i, t, k),
    )?;
    for k in 0..3 {
        let bytes = |shift: usize| (0..n).map(|i| ((i * 37 + 11 * k + shift) % 256) as i32).collect::<Vec<_>>();
        let (ids, next) =
            (Tensor::<G, i32>::from_vec(bytes(0), [BATCH, CONTEXT])?, Tensor::<G, i32>::from_vec(bytes(37), [n])?);
        nn::zero_grad(&eager);
        let want = loss_of(&eager, &ids, &next, eager.mask())?;
        want.backward()?;
        clip_grad_norm(&eager, 1.0)?;
        eager_opt.step(&mut eager)?;
        let (mut ii, mut ti, _) = step.inputs_mut();
        ii.copy_from(&ids)?;
        ti.copy_from(&next)?;
        let (got, want) = (step.replay()?.item()?, want.item()?);
        assert!((got - want).abs() <= 1e-5 * want.abs(), "step {k}: graphed loss {got}, eager {want}");
        if locus::backend_name()? == "host" {
            assert_eq!(got.to_bits(), want.to_bits(), "step {k}: the host runs the same arithmetic");
        }
    }
    Ok(())
}
