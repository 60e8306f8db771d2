//! AdamW and gradient clipping over many parameters at once (up to 32 tensors per
//! kernel): against plain-Rust f64 references, over more parameters than one launch
//! takes, with parameters at different step counts, with sizes on both sides of a block
//! and of the grid's cap, and against the same updates as tensor ops on the host placement.

use locus::nn::{self, Parameters};
use locus::optim::{clip_grad_norm, AdamW};
use locus::{Cpu, Cuda, Param, Tensor};

type G = Cuda<0>;

/// Parameters `p0`, `p1`, … of the given sizes.
struct Many<D: locus::Device, T: locus::Float> {
    ps: Vec<Param<D, T>>,
}

impl<D: locus::Device, T: locus::Float> Parameters<D, T> for Many<D, T> {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Param<D, T>)) {
        for (i, p) in self.ps.iter().enumerate() {
            p.visit_params(&nn::join(prefix, &format!("p{i}")), f);
        }
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Param<D, T>)) {
        for (i, p) in self.ps.iter_mut().enumerate() {
            p.visit_params_mut(&nn::join(prefix, &format!("p{i}")), f);
        }
    }
}

/// 41 sizes (two launches of 32 and 9): one element, a block and one more, and one past
/// the 1024 blocks of 256 threads a launch takes before its threads loop.
fn sizes() -> Vec<usize> {
    let mut s: Vec<usize> = (0..38).map(|i| 1 + 37 * i).collect();
    s.extend([256, 257, 1024 * 256 + 3]);
    s
}

/// Value `k` of parameter `i` (or of its gradient, with `salt`), in [-1, 1).
fn value(i: usize, k: usize, salt: u64) -> f64 {
    let h = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ (k as u64).wrapping_mul(0xc2b2_ae3d_27d4_eb4f) ^ salt;
    let h = h ^ (h >> 29);
    ((h.wrapping_mul(0xbf58_476d_1ce4_e5b9) >> 11) as f64 / (1u64 << 53) as f64) * 2.0 - 1.0
}

fn many<D: locus::StaticDevice>() -> locus::Result<Many<D, f64>> {
    let ps = sizes()
        .iter()
        .enumerate()
        .map(|(i, &n)| Tensor::<D, f64>::from_vec((0..n).map(|k| value(i, k, 0)).collect(), [n]).map(Param::new))
        .collect::<locus::Result<_>>()?;
    Ok(Many { ps })
}

/// Gradient `step` of parameter `i`; parameters whose index is a multiple of 3 get none
/// in step 0, so they run one step behind the others afterwards.
fn grad_of(i: usize, n: usize, step: u64) -> Option<Vec<f64>> {
    (step > 0 || i % 3 != 0).then(|| (0..n).map(|k| value(i, k, 1 + step)).collect())
}

fn set_grads<D: locus::StaticDevice>(m: &Many<D, f64>, step: u64) -> locus::Result<()> {
    for (i, p) in m.ps.iter().enumerate() {
        let g = grad_of(i, p.numel(), step).map(|g| Tensor::<D, f64>::from_vec(g, [p.numel()])).transpose()?;
        p.set_grad(g)?;
    }
    Ok(())
}

#[test]
fn adamw_over_many_parameters_at_different_steps_matches_the_update_rule() -> locus::Result<()> {
    let (lr, b1, b2, eps, wd) = (0.01, 0.8, 0.99, 1e-8, 0.1);
    let mut on_gpu = many::<G>()?;
    let mut on_host = many::<Cpu>()?;
    let mut opt = AdamW::<G, f64>::new(lr).betas(b1, b2).eps(eps).weight_decay(wd);
    let mut opt_host = AdamW::<Cpu, f64>::new(lr).betas(b1, b2).eps(eps).weight_decay(wd);
    let sizes = sizes();
    let mut w: Vec<Vec<f64>> =
        sizes.iter().enumerate().map(|(i, &n)| (0..n).map(|k| value(i, k, 0)).collect()).collect();
    let mut m: Vec<Vec<f64>> = sizes.iter().map(|&n| vec![0.0; n]).collect();
    let mut v = m.clone();
    let mut t = vec![0i32; sizes.len()];
    for step in 0..3 {
        set_grads(&on_gpu, step)?;
        set_grads(&on_host, step)?;
        opt.step(&mut on_gpu)?;
        opt_host.step(&mut on_host)?;
        for (i, &n) in sizes.iter().enumerate() {
            let Some(g) = grad_of(i, n, step) else { continue };
            t[i] += 1;
            let (bc1, bc2) = (1.0 - b1.powi(t[i]), 1.0 - b2.powi(t[i]));
            for k in 0..n {
                w[i][k] *= 1.0 - lr * wd;
                m[i][k] = b1 * m[i][k] + (1.0 - b1) * g[k];
                v[i][k] = b2 * v[i][k] + (1.0 - b2) * g[k] * g[k];
                w[i][k] -= lr / bc1 * m[i][k] / (v[i][k].sqrt() / bc2.sqrt() + eps);
            }
        }
        for (i, (a, b)) in on_gpu.ps.iter().zip(&on_host.ps).enumerate() {
            let (a, b) = (a.to_vec()?, b.to_vec()?);
            for k in 0..w[i].len() {
                let want = w[i][k];
                assert!((a[k] - want).abs() <= 1e-12 * (1.0 + want.abs()), "p{i}[{k}] step {step}: {} vs {want}", a[k]);
                assert!((b[k] - want).abs() <= 1e-12 * (1.0 + want.abs()), "host p{i}[{k}] step {step}");
            }
            assert_eq!(opt.steps_of(&format!("p{i}")), t[i] as u64, "p{i}'s steps");
        }
    }
    Ok(())
}

#[test]
fn clipping_many_gradients_scales_them_all_by_one_norm() -> locus::Result<()> {
    let model = many::<G>()?;
    set_grads(&model, 0)?;
    let grads: Vec<Option<Vec<f64>>> =
        model.ps.iter().map(|p| p.grad().map(|g| g.to_vec()).transpose()).collect::<locus::Result<_>>()?;
    let norm = grads.iter().flatten().flatten().map(|x| x * x).sum::<f64>().sqrt();
    // A gradient the caller holds keeps its values; the parameter's is scaled.
    let held = model.ps[1].grad().unwrap();
    let got = clip_grad_norm(&model, 1.0)?.unwrap().item()?;
    assert!((got - norm).abs() <= 1e-12 * norm, "{got} vs {norm}");
    let k = 1.0 / (norm + 1e-6);
    for (i, (p, g)) in model.ps.iter().zip(&grads).enumerate() {
        match (p.grad(), g) {
            (Some(now), Some(g)) => {
                for (a, b) in now.to_vec()?.iter().zip(g) {
                    assert!((a - b * k).abs() <= 1e-12 * (1.0 + (b * k).abs()), "p{i}: {a} vs {}", b * k);
                }
            }
            (None, None) => {}
            (now, _) => panic!("p{i} has gradient {:?} after clipping", now.map(|t| t.shape().to_vec())),
        }
    }
    assert_eq!(held.to_vec()?, grads[1].clone().unwrap(), "the caller's handle keeps the unscaled values");
    // Under the limit nothing changes but the norm is still returned.
    let before: Vec<f64> = model.ps[2].grad().unwrap().to_vec()?;
    let again = clip_grad_norm(&model, 1e9)?.unwrap().item()?;
    assert!((again - 1.0).abs() < 1e-5, "the clipped norm is 1: {again}");
    assert_eq!(model.ps[2].grad().unwrap().to_vec()?, before);
    Ok(())
}

/// The f32 path (the kernels' f32 sums) against the f64 reference: within f32's rounding.
#[test]
fn clipping_in_f32_is_within_rounding_of_the_f64_norm() -> locus::Result<()> {
    let sizes = sizes();
    let ps = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let p = Param::new(Tensor::<G>::zeros([n])?);
            p.set_grad(Some(Tensor::<G>::from_vec((0..n).map(|k| value(i, k, 7) as f32).collect(), [n])?))?;
            Ok(p)
        })
        .collect::<locus::Result<Vec<_>>>()?;
    let model = Many { ps };
    let norm = (0..sizes.len())
        .flat_map(|i| (0..sizes[i]).map(move |k| (value(i, k, 7) as f32 as f64).powi(2)))
        .sum::<f64>()
        .sqrt();
    let got = clip_grad_norm(&model, 0.5)?.unwrap().item()? as f64;
    assert!((got - norm).abs() <= 1e-5 * norm, "{got} vs {norm}");
    let last = model.ps.last().unwrap().grad().unwrap().to_vec()?;
    let i = sizes.len() - 1;
    let k = 0.5 / (got + 1e-6);
    for (j, a) in last.iter().enumerate().step_by(997) {
        let want = value(i, j, 7) as f32 as f64 * k;
        assert!((*a as f64 - want).abs() <= 1e-6 * (1.0 + want.abs()), "[{j}] {a} vs {want}");
    }
    Ok(())
}

/// Two parameters, the second listed only on every other visit: a `Parameters` impl whose
/// list changes between the two passes of a step.
struct Fickle {
    a: Param<G>,
    b: Param<G>,
    visits: std::cell::Cell<usize>,
}

impl Parameters<G> for Fickle {
    fn visit_params(&self, prefix: &str, f: &mut dyn FnMut(&str, &Param<G>)) {
        self.a.visit_params(&nn::join(prefix, "a"), f);
        self.b.visit_params(&nn::join(prefix, "b"), f);
    }
    fn visit_params_mut(&mut self, prefix: &str, f: &mut dyn FnMut(&str, &mut Param<G>)) {
        let n = self.visits.get();
        self.visits.set(n + 1);
        self.a.visit_params_mut(&nn::join(prefix, "a"), f);
        if n % 2 == 0 {
            self.b.visit_params_mut(&nn::join(prefix, "b"), f);
        }
    }
}

/// A step takes each parameter's values out and puts them back in a second visit; a
/// parameter that visit does not list again is an `Err` naming it, not a silent loss.
#[test]
fn a_parameter_the_second_visit_does_not_list_is_an_error_naming_it() -> locus::Result<()> {
    let mut m = Fickle {
        a: Param::new(Tensor::<G>::ones([3])?),
        b: Param::new(Tensor::<G>::ones([2])?),
        visits: std::cell::Cell::new(0),
    };
    m.a.set_grad(Some(Tensor::<G>::ones([3])?))?;
    m.b.set_grad(Some(Tensor::<G>::ones([2])?))?;
    match AdamW::<G>::new(0.1).step(&mut m) {
        Err(locus::Error::InvalidArgument { reason, .. }) => assert!(reason.contains("`b`"), "{reason}"),
        other => panic!("expected an error naming `b`, got {other:?}"),
    }
    assert!(m.a.to_vec()?.iter().all(|v| *v < 1.0), "`a` was stepped and given back");
    Ok(())
}
