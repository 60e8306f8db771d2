//! Autograd (issue 33): every differentiable op's gradient against central finite
//! differences (f64 on cuda:0 of the selected backend, shapes with broadcast and 0-size
//! dims), then the tape's rules: freed after backward unless retained, accumulation,
//! `no_grad`, `detach`, in-place writes after a read (an `Err` naming both ops), a value
//! written in place then used, gradients typed and placed on their parameter's device,
//! nothing left allocated after a dropped loss, a 50 000-op chain dropped without
//! recursion, and backward on the streams the forward ran on (the hazard checker is on).

use locus::{memory_allocated, on_stream, Cpu, Cuda, DeviceId, Error, Param, Stream, Tensor};

type G = Cuda<0>;
type T = Tensor<G, f64>;

/// Deterministic values in `[-scale, scale)` (a 64-bit LCG's top bits).
fn values(n: usize, seed: u64, scale: f64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            ((s >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// An input: its shape and values.
struct Input {
    shape: Vec<usize>,
    data: Vec<f64>,
}

fn input(shape: &[usize], seed: u64) -> Input {
    let n = shape.iter().product();
    Input { shape: shape.to_vec(), data: values(n, seed, 1.0) }
}

/// `input` with every value moved away from zero into `±[lo, lo + 1)`: for ops whose
/// derivative jumps at 0 (relu, abs) or that need positive inputs (after `.abs()`).
fn input_away(shape: &[usize], seed: u64, lo: f64) -> Input {
    let mut i = input(shape, seed);
    for v in &mut i.data {
        *v = v.signum() * (v.abs() + lo);
    }
    i
}

fn positive(shape: &[usize], seed: u64) -> Input {
    let mut i = input_away(shape, seed, 0.5);
    for v in &mut i.data {
        *v = v.abs();
    }
    i
}

/// Checks the gradients of `Σ f(inputs) · r` (r fixed random weights) against central
/// differences for every input element.
fn check(name: &str, inputs: &[Input], f: impl Fn(&[&T]) -> locus::Result<T>) {
    let tensors: Vec<T> = inputs.iter().map(|i| T::from_vec(i.data.clone(), &i.shape).unwrap()).collect();
    let params: Vec<Param<G, f64>> = tensors.iter().map(|t| Param::new(t.clone())).collect();
    let refs: Vec<&T> = params.iter().map(|p| &**p).collect();
    let out = f(&refs).unwrap_or_else(|e| panic!("{name}: forward: {e}"));
    assert!(out.tracks_grad() || inputs.is_empty(), "{name}: the result tracks no gradient");
    let r = T::from_vec(values(out.numel(), 99, 1.0), out.shape()).unwrap();
    let weigh = |y: &T| -> f64 { (y * &r).unwrap().sum().unwrap().item().unwrap() };
    let loss = (&out * &r).unwrap().sum().unwrap();
    loss.backward().unwrap_or_else(|e| panic!("{name}: backward: {e}"));
    let eps = 1e-6;
    for (k, inp) in inputs.iter().enumerate() {
        let analytic = match params[k].grad() {
            Some(g) => {
                assert_eq!(g.shape(), &inp.shape[..], "{name}: gradient {k} has the wrong shape");
                assert_eq!(g.device(), DeviceId::Cuda(0));
                g.to_vec().unwrap()
            }
            None => vec![0.0; inp.data.len()],
        };
        for j in 0..inp.data.len() {
            let at = |d: f64| {
                let mut v = inp.data.clone();
                v[j] += d;
                let mut xs: Vec<T> = tensors.clone();
                xs[k] = T::from_vec(v, &inp.shape).unwrap();
                let refs: Vec<&T> = xs.iter().collect();
                weigh(&f(&refs).unwrap())
            };
            let numeric = (at(eps) - at(-eps)) / (2.0 * eps);
            let tol = 1e-6 + 1e-5 * numeric.abs();
            assert!(
                (analytic[j] - numeric).abs() <= tol,
                "{name}: d/d input {k}[{j}]: backward gives {}, finite differences {numeric}",
                analytic[j]
            );
        }
    }
}

#[test]
fn elementwise_with_broadcasting() {
    let pairs: [(&[usize], &[usize]); 5] =
        [(&[2, 3], &[2, 3]), (&[3, 1, 4], &[2, 4]), (&[4], &[2, 1]), (&[0, 3], &[3]), (&[], &[2, 2])];
    for (i, (a, b)) in pairs.iter().enumerate() {
        let s = i as u64 * 10;
        check("add", &[input(a, s), input(b, s + 1)], |x| x[0] + x[1]);
        check("sub", &[input(a, s + 2), input(b, s + 3)], |x| x[0] - x[1]);
        check("mul", &[input(a, s + 4), input(b, s + 5)], |x| x[0] * x[1]);
        check("div", &[input(a, s + 6), input_away(b, s + 7, 0.5)], |x| x[0] / x[1]);
    }
}

#[test]
fn scalar_ops_on_both_sides() {
    let x = || input(&[2, 3], 1);
    check("x + s", &[x()], |x| x[0] + 2.0);
    check("x - s", &[x()], |x| x[0] - 2.0);
    check("x * s", &[x()], |x| x[0] * 3.0);
    check("x / s", &[x()], |x| x[0] / 3.0);
    check("s + x", &[x()], |x| 2.0 + x[0]);
    check("s - x", &[x()], |x| 2.0 - x[0]);
    check("s * x", &[x()], |x| 3.0 * x[0]);
    check("s / x", &[input_away(&[2, 3], 2, 0.5)], |x| 3.0 / x[0]);
    check("neg", &[x()], |x| -x[0]);
}

#[test]
fn unary_ops_and_activations() {
    let s = [3, 4];
    check("relu", &[input_away(&s, 1, 0.1)], |x| x[0].relu());
    check("abs", &[input_away(&s, 2, 0.1)], |x| x[0].abs());
    check("square", &[input(&s, 3)], |x| x[0].square());
    check("sqrt", &[positive(&s, 4)], |x| x[0].sqrt());
    check("exp", &[input(&s, 5)], |x| x[0].exp());
    check("log", &[positive(&s, 6)], |x| x[0].log());
    check("tanh", &[input(&s, 7)], |x| x[0].tanh());
    check("sigmoid", &[input(&s, 8)], |x| x[0].sigmoid());
    check("gelu", &[input(&s, 9)], |x| x[0].gelu());
    check("gelu at 0", &[Input { shape: vec![1], data: vec![0.0] }], |x| x[0].gelu());
    check("gelu_tanh", &[input(&s, 10)], |x| x[0].gelu_tanh());
    check("sin", &[input_away(&s, 15, 1.0)], |x| x[0].sin());
    check("cos", &[input_away(&s, 16, 1.0)], |x| x[0].cos());
    check("pow 3", &[input(&s, 11)], |x| x[0].pow(3.0));
    check("pow 0.5", &[positive(&s, 12)], |x| x[0].pow(0.5));
    check("clamp", &[input(&s, 13)], |x| x[0].clamp(-0.5, 0.5));
    check("empty", &[input(&[0, 4], 14)], |x| x[0].exp());
}

#[test]
fn matmul_all_forms_and_transposes() {
    check("matmul 2-d", &[input(&[3, 4], 1), input(&[4, 2], 2)], |x| x[0].matmul(x[1]));
    check("matmul batched", &[input(&[2, 3, 4], 3), input(&[2, 4, 2], 4)], |x| x[0].matmul(x[1]));
    check("matmul shared rhs", &[input(&[2, 3, 4], 5), input(&[4, 2], 6)], |x| x[0].matmul(x[1]));
    check("matmul k = 0", &[input(&[3, 0], 7), input(&[0, 2], 8)], |x| x[0].matmul(x[1]));
    check("t", &[input(&[3, 4], 9)], |x| x[0].t());
    check("transpose", &[input(&[2, 3, 4], 10)], |x| x[0].transpose(0, 2));
    check("unsqueeze", &[input(&[3, 4], 11)], |x| x[0].unsqueeze(1)?.exp());
    check("squeeze", &[input(&[3, 1, 4], 12)], |x| x[0].squeeze(1)?.exp());
}

#[test]
fn reductions() {
    let s = [3, 4];
    check("sum", &[input(&s, 1)], |x| x[0].sum());
    check("sum empty", &[input(&[0, 2], 1)], |x| x[0].sum());
    check("sum_dim", &[input(&s, 2)], |x| x[0].sum_dim(1, false));
    check("sum_dim keep", &[input(&[2, 3, 4], 3)], |x| x[0].sum_dim(1, true));
    check("mean", &[input(&s, 4)], |x| x[0].mean());
    check("mean_dim", &[input(&[2, 3, 4], 5)], |x| x[0].mean_dim(2, false));
    check("max", &[input(&s, 6)], |x| x[0].max());
    check("max_dim", &[input(&[2, 3, 4], 7)], |x| Ok(x[0].max_dim(1, false)?.0));
    check("max_dim keep", &[input(&s, 8)], |x| Ok(x[0].max_dim(0, true)?.0));
    check("min", &[input(&s, 9)], |x| x[0].min());
    check("min_dim", &[input(&[2, 3, 4], 10)], |x| Ok(x[0].min_dim(1, false)?.0));
    check("min_dim keep", &[input(&s, 11)], |x| Ok(x[0].min_dim(0, true)?.0));
}

#[test]
fn max_of_ties_shares_the_gradient() {
    let w = Param::new(T::from_vec(vec![1.0, 3.0, 3.0], [3]).unwrap());
    w.max().unwrap().backward().unwrap();
    assert_eq!(w.grad().unwrap().to_vec().unwrap(), vec![0.0, 0.5, 0.5]);
}

#[test]
fn min_of_ties_shares_the_gradient_and_min_dim_picks_the_first() {
    let w = Param::new(T::from_vec(vec![-1.0, 3.0, -1.0, 2.0], [2, 2]).unwrap());
    w.min().unwrap().backward().unwrap();
    assert_eq!(w.grad().unwrap().to_vec().unwrap(), vec![0.5, 0.0, 0.5, 0.0]);
    let v = Param::new(T::from_vec(vec![1.0, 1.0, 0.0, 5.0, 0.0, 0.0], [2, 3]).unwrap());
    v.min_dim(1, false).unwrap().0.sum().unwrap().backward().unwrap();
    assert_eq!(v.grad().unwrap().to_vec().unwrap(), vec![0.0, 0.0, 1.0, 0.0, 1.0, 0.0]);
}

#[test]
fn softmax_family_and_cross_entropy() {
    check("softmax dim 1", &[input(&[3, 4], 1)], |x| x[0].softmax(1));
    check("softmax dim 0", &[input(&[3, 4], 2)], |x| x[0].softmax(0));
    check("log_softmax", &[input(&[2, 3, 4], 3)], |x| x[0].log_softmax(1));
    check("softmax over the last dim", &[input(&[2, 3, 4], 5)], |x| x[0].softmax(2));
    check("log_softmax over the last dim", &[input(&[2, 3, 4], 6)], |x| x[0].log_softmax(2));
    check("softmax of a scalar", &[input(&[], 4)], |x| x[0].softmax(0));
    let targets = Tensor::<G, i32>::from_vec(vec![2, 0, 3], [3]).unwrap();
    check("cross_entropy", &[input(&[3, 4], 5)], |x| x[0].cross_entropy(&targets));
}

#[test]
fn index_select_and_layout_ops() {
    let idx = Tensor::<G, i32>::from_vec(vec![2, 0, 2, 1], [4]).unwrap();
    check("index_select dim 0", &[input(&[3, 2], 1)], |x| x[0].index_select(0, &idx));
    check("index_select dim 1", &[input(&[2, 3, 2], 2)], |x| x[0].index_select(1, &idx));
    check("narrow", &[input(&[3, 5], 3)], |x| x[0].narrow(1, 1, 3));
    check("narrow to nothing", &[input(&[3, 5], 3)], |x| x[0].narrow(1, 2, 0));
    check("select", &[input(&[3, 5], 4)], |x| x[0].select(0, 2));
    check("reshape", &[input(&[3, 4], 5)], |x| x[0].reshape([2, 6]));
    check("cat", &[input(&[2, 3], 6), input(&[1, 3], 7)], |x| x[0].cat(x[1]));
    check("cat_dim", &[input(&[2, 3], 8), input(&[2, 1], 9)], |x| x[0].cat_dim(x[1], 1));
    check("concat", &[input(&[1, 2], 10), input(&[0, 2], 11), input(&[2, 2], 12)], T::concat);
    check("concat_dim", &[input(&[2, 1], 13), input(&[2, 2], 14)], |x| T::concat_dim(x, 1));
    check("stack", &[input(&[2, 3], 15), input(&[2, 3], 16)], |x| T::stack(x, 1));
    check("chunk", &[input(&[5, 2], 17)], |x| {
        let parts = x[0].chunk(2)?;
        (&parts[1].sum()? * 3.0)? + &parts[0].sum()?
    });
    let mask = Tensor::<G, u8>::from_vec(vec![1, 0, 0, 1, 1, 0], [2, 3]).unwrap();
    check("where", &[input(&[2, 3], 18), input(&[3], 19)], |x| Tensor::where_(&mask, x[0], x[1]));
    check("used twice", &[input(&[2, 3], 20)], |x| x[0] * x[0]);
}

#[test]
fn to_dtype_passes_the_gradient_back_in_the_input_type() -> locus::Result<()> {
    let w = Param::new(Tensor::<G, f32>::from_vec(vec![1.0, 2.0], [2])?);
    let h = w.to_dtype::<locus::bf16>()?;
    let loss = (&h * locus::bf16::from_f32(3.0))?.to_dtype::<f32>()?.sum()?;
    loss.backward()?;
    let g: Tensor<G, f32> = w.grad().unwrap();
    assert_eq!(g.to_vec()?, vec![3.0, 3.0]);
    Ok(())
}

#[test]
fn a_copy_between_placements_sends_the_gradient_home() -> locus::Result<()> {
    let w = Param::new(Tensor::<G>::from_vec(vec![1.0, -2.0], [2])?);
    let on_host: Tensor<Cpu> = w.to::<Cpu>()?;
    let loss = on_host.square()?.sum()?;
    loss.backward()?;
    let g: Tensor<G> = w.grad().unwrap();
    assert_eq!(g.device(), DeviceId::Cuda(0));
    assert_eq!(g.to_vec()?, vec![2.0, -4.0]);
    if locus::testing::needs_devices_for(2, "the cuda:0 → cuda:1 half")? {
        w.zero_grad();
        let there = w.to::<Cuda<1>>()?;
        (&there * 5.0)?.sum()?.backward()?;
        assert_eq!(w.grad().unwrap().device(), DeviceId::Cuda(0));
        assert_eq!(w.grad().unwrap().to_vec()?, vec![5.0, 5.0]);
    }
    Ok(())
}

fn backward_err(r: locus::Result<()>) -> String {
    match r {
        Err(Error::Backward { reason }) => reason,
        other => panic!("expected Error::Backward, got {other:?}"),
    }
}

#[test]
fn a_second_backward_needs_retain_graph_and_gradients_accumulate() -> locus::Result<()> {
    let w = Param::new(T::from_vec(vec![1.0, 2.0], [2])?);
    let loss = w.square()?.sum()?;
    loss.backward_retain_graph()?;
    assert_eq!(w.grad().unwrap().to_vec()?, vec![2.0, 4.0]);
    loss.backward()?;
    assert_eq!(w.grad().unwrap().to_vec()?, vec![4.0, 8.0], "the second pass adds to the first");
    let e = backward_err(loss.backward());
    assert!(e.contains("freed by an earlier backward") && e.contains("backward_retain_graph"), "{e}");
    assert_eq!(w.grad().unwrap().to_vec()?, vec![4.0, 8.0], "a failed pass changes no gradient");
    Ok(())
}

#[test]
fn no_grad_and_detach_record_nothing() -> locus::Result<()> {
    let w = Param::new(T::from_vec(vec![1.0, 2.0], [2])?);
    let y = locus::no_grad!({ w.exp() })?;
    assert!(!y.tracks_grad());
    assert!(locus::is_grad_enabled(), "the scope ends with its block");
    let e = backward_err(y.sum()?.backward());
    assert!(e.contains("tracks no gradients"), "{e}");
    {
        let _off = locus::no_grad();
        assert!(!(&*w * 2.0)?.tracks_grad());
        let _on = locus::enable_grad();
        assert!((&*w * 2.0)?.tracks_grad());
    }
    // Only the tracked half of w·detach(w) gets a gradient: d/dw (w · c) = c.
    let loss = (&*w * &w.detach())?.sum()?;
    loss.backward()?;
    assert_eq!(w.grad().unwrap().to_vec()?, vec![1.0, 2.0]);
    // Integer results never track.
    let idx = w.argmax(0, false)?;
    assert!(!idx.tracks_grad());
    Ok(())
}

#[test]
fn a_parameter_written_after_a_read_makes_backward_an_err_naming_both() -> locus::Result<()> {
    let mut w = Param::new(T::from_vec(vec![1.0, 2.0], [2])?);
    let x = T::from_vec(vec![3.0, 4.0], [2])?;
    let loss = (&x * &*w)?.sum()?;
    w.set(T::zeros([2])?)?; // an optimizer step before backward
    let e = backward_err(loss.backward());
    assert!(e.contains("`mul`") && e.contains("`Param::set`") && e.contains("a parameter"), "{e}");
    assert!(w.grad().is_none());
    // After the write, a new forward pass is fine.
    (&x * &*w)?.sum()?.backward()?;
    assert_eq!(w.grad().unwrap().to_vec()?, vec![3.0, 4.0]);
    Ok(())
}

#[test]
fn a_result_written_in_place_then_used_makes_backward_an_err() -> locus::Result<()> {
    let w = Param::new(Tensor::<Cpu>::from_vec(vec![1.0, 2.0], [2])?);
    let before = (&*w * 2.0)?;
    let mut h = before.clone();
    h.as_mut_slice()?[0] = 5.0;
    let e = backward_err(h.sum()?.backward());
    assert!(e.contains("`mul`") && e.contains("`as_mut_slice`"), "{e}");
    // The value as the op made it, read before the write, still has its gradient.
    before.sum()?.backward()?;
    assert_eq!(w.grad().unwrap().to_vec()?, vec![2.0, 2.0]);
    Ok(())
}

#[test]
fn backward_of_a_non_scalar_needs_its_gradient() -> locus::Result<()> {
    let w = Param::new(T::from_vec(vec![1.0, 2.0], [2])?);
    let y = (&*w * 3.0)?;
    let e = backward_err(y.backward());
    assert!(e.contains("one-element loss"), "{e}");
    let bad = y.backward_with(&T::ones([3])?, false);
    assert!(matches!(bad, Err(Error::ShapeMismatch { op: "backward", .. })), "{bad:?}");
    y.backward_with(&T::from_vec(vec![1.0, 10.0], [2])?, false)?;
    assert_eq!(w.grad().unwrap().to_vec()?, vec![3.0, 30.0]);
    Ok(())
}

#[test]
fn dropping_a_loss_frees_the_tape() -> locus::Result<()> {
    let w = Param::new(Tensor::<G>::rand([64, 64], 1)?);
    let x = Tensor::<G>::rand([32, 64], 2)?;
    let base = memory_allocated(DeviceId::Cuda(0))?;
    let loss = x.matmul(&w)?.relu()?.softmax(1)?.sum()?;
    assert!(memory_allocated(DeviceId::Cuda(0))? > base, "the tape holds its saved tensors");
    drop(loss);
    locus::synchronize(DeviceId::Cuda(0))?;
    assert_eq!(memory_allocated(DeviceId::Cuda(0))?, base);
    // And after a backward pass, only the gradient stays.
    x.matmul(&w)?.sum()?.backward()?;
    locus::synchronize(DeviceId::Cuda(0))?;
    assert_eq!(memory_allocated(DeviceId::Cuda(0))?, base + 64 * 64 * 4);
    Ok(())
}

#[test]
fn a_long_chain_is_dropped_without_recursion() -> locus::Result<()> {
    let w = Param::new(Tensor::<Cpu>::ones([1])?);
    let mut y = (&*w * 1.0)?;
    for _ in 0..50_000 {
        y = (&y * 1.0)?;
    }
    drop(y); // a recursive drop would overflow the test thread's stack
    let mut y = (&*w * 1.0)?;
    for _ in 0..20_000 {
        y = (&y + 0.0)?;
    }
    y.sum()?.backward()?;
    assert_eq!(w.grad().unwrap().to_vec()?, vec![1.0]);
    Ok(())
}

#[test]
fn backward_runs_on_the_streams_the_forward_ran_on() -> locus::Result<()> {
    let side = Stream::<G>::new()?;
    let w = Param::new(Tensor::<G>::rand([128, 128], 3)?);
    let x = Tensor::<G>::rand([64, 128], 4)?;
    // The forward on a side stream, the loss read and backward on the default one.
    let h = on_stream(&side, || x.matmul(&w)?.tanh())?;
    let loss = (h.square()?.mean()? * 2.0)?;
    loss.backward()?;
    let g = w.grad().unwrap();
    // The same on one stream: the same gradient.
    let w2 = Param::new(w.detach());
    (x.matmul(&w2)?.tanh()?.square()?.mean()? * 2.0)?.backward()?;
    assert_eq!(g.to_vec()?, w2.grad().unwrap().to_vec()?);
    // And a backward called while another stream is current still runs each rule on
    // the stream of its op.
    w.zero_grad();
    let loss = (x.matmul(&w)?.tanh()?.square()?.mean()? * 2.0)?;
    on_stream(&side, || loss.backward())?;
    assert_eq!(w.grad().unwrap().to_vec()?, g.to_vec()?);
    Ok(())
}

mod properties {
    //! The tape's rules as properties over random shapes and op chains: gradients of
    //! broadcasting ops and reductions (0-size and broadcast dims included) against finite
    //! differences; accumulation over passes; `no_grad` and `detach` cut exactly the
    //! recorded path; a write in place between forward and backward is an `Err` exactly
    //! when it happened, and then no gradient changed.

    use super::*;
    use proptest::prelude::*;

    /// A shape of up to 3 dims of 0 to 3, and one that broadcasts with it (dims dropped
    /// from the front or set to 1).
    fn broadcast_pair() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
        prop::collection::vec(0usize..4, 0..4).prop_flat_map(|a| {
            let n = a.len();
            (Just(a), 0..=n, prop::collection::vec(any::<bool>(), n)).prop_map(|(a, drop, ones)| {
                let b: Vec<usize> = a.iter().zip(&ones).skip(drop).map(|(&d, &one)| if one { 1 } else { d }).collect();
                (a, b)
            })
        })
    }

    /// A unary step of a chain and how it is recorded.
    #[derive(Clone, Copy, Debug)]
    enum Step {
        Scale(f64),
        Shift(f64),
        Square,
        Tanh,
    }

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Mode {
        Recorded,
        NoGrad,
        Detached,
    }

    fn apply(step: Step, x: &T) -> locus::Result<T> {
        match step {
            Step::Scale(c) => x * c,
            Step::Shift(c) => x + c,
            Step::Square => x.square(),
            Step::Tanh => x.tanh(),
        }
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (-2.0f64..2.0).prop_map(Step::Scale),
            (-1.0f64..1.0).prop_map(Step::Shift),
            Just(Step::Square),
            Just(Step::Tanh)
        ]
    }

    fn mode() -> impl Strategy<Value = Mode> {
        prop_oneof![4 => Just(Mode::Recorded), 1 => Just(Mode::NoGrad), 1 => Just(Mode::Detached)]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

        #[test]
        fn broadcasting_ops_and_reductions_match_finite_differences((a, b) in broadcast_pair(), seed in 0u64..1000) {
            let (x, y) = (input(&a, seed), input_away(&b, seed + 1, 0.5));
            check("add", &[input(&a, seed), input(&b, seed + 2)], |v| v[0] + v[1]);
            check("mul", &[input(&a, seed), input(&b, seed + 3)], |v| v[0] * v[1]);
            check("div", &[x, y], |v| v[0] / v[1]);
            if !a.is_empty() {
                let d = seed as usize % a.len();
                check("sum_dim", &[input(&a, seed + 4)], move |v| v[0].sum_dim(d, seed % 2 == 0));
                check("mean", &[input(&a, seed + 5)], |v| v[0].sum()? + v[0].square()?.sum()?);
            }
        }

        #[test]
        fn gradients_accumulate_over_passes(shape in prop::collection::vec(0usize..4, 0..3), passes in 1usize..4) {
            let w = Param::new(T::from_vec(values(shape.iter().product(), 7, 1.0), &shape).unwrap());
            let loss = w.tanh().unwrap().sum().unwrap();
            for _ in 0..passes {
                loss.backward_retain_graph().unwrap();
            }
            let one = Param::new(w.detach());
            one.tanh().unwrap().sum().unwrap().backward().unwrap();
            let (many, single) = (w.grad().unwrap().to_vec().unwrap(), one.grad().unwrap().to_vec().unwrap());
            for (m, s) in many.iter().zip(&single) {
                prop_assert!((m - s * passes as f64).abs() <= 1e-12 * (1.0 + m.abs()), "{m} vs {passes} x {s}");
            }
        }

        #[test]
        fn no_grad_and_detach_cut_exactly_the_recorded_path(
            chain in prop::collection::vec((step(), mode()), 1..6),
            x0 in prop::collection::vec(-1.0f64..1.0, 3),
        ) {
            let w = Param::new(T::from_vec(x0.clone(), [3]).unwrap());
            let run = |x: &T, record: bool| -> locus::Result<T> {
                let mut y = x.clone();
                for &(s, m) in &chain {
                    y = match (m, record) {
                        (Mode::Recorded, _) | (_, false) => apply(s, &y)?,
                        (Mode::NoGrad, true) => locus::no_grad!({ apply(s, &y) })?,
                        (Mode::Detached, true) => apply(s, &y.detach())?,
                    };
                }
                Ok(y)
            };
            let y = run(&w, true).unwrap();
            let all_recorded = chain.iter().all(|(_, m)| *m == Mode::Recorded);
            prop_assert_eq!(y.tracks_grad(), all_recorded);
            if all_recorded {
                y.sum().unwrap().backward().unwrap();
                let g = w.grad().unwrap().to_vec().unwrap();
                for i in 0..3 {
                    let at = |d: f64| {
                        let mut v = x0.clone();
                        v[i] += d;
                        run(&T::from_vec(v, [3]).unwrap(), false).unwrap().sum().unwrap().item().unwrap()
                    };
                    let numeric = (at(1e-6) - at(-1e-6)) / 2e-6;
                    prop_assert!((g[i] - numeric).abs() <= 1e-5 * (1.0 + numeric.abs()), "{} vs {}", g[i], numeric);
                }
            } else {
                prop_assert!(y.sum().unwrap().backward().is_err());
                prop_assert!(w.grad().is_none());
            }
        }

        #[test]
        fn a_write_between_forward_and_backward_is_an_err_exactly_when_it_happened(write in any::<bool>(), second in any::<bool>()) {
            let mut w = Param::new(T::from_vec(vec![0.5, -1.0], [2]).unwrap());
            let v = Param::new(T::from_vec(vec![2.0, 3.0], [2]).unwrap());
            let loss = (&*w * &*v).unwrap().sum().unwrap();
            if write {
                w.set(T::ones([2]).unwrap()).unwrap();
            }
            if second {
                // A second, untouched parameter keeps no gradient from a failed pass either.
                v.zero_grad();
            }
            let r = loss.backward();
            prop_assert_eq!(r.is_err(), write);
            if write {
                prop_assert!(w.grad().is_none() && v.grad().is_none(), "a failed pass changes no gradient");
            } else {
                prop_assert_eq!(w.grad().unwrap().to_vec().unwrap(), vec![2.0, 3.0]);
                prop_assert_eq!(v.grad().unwrap().to_vec().unwrap(), vec![0.5, -1.0]);
            }
        }
    }
}

#[test]
fn a_graph_input_written_after_an_op_read_it_makes_backward_an_err() -> locus::Result<()> {
    let w = Param::new(T::from_vec(vec![1.0, 2.0], [2])?);
    let mut h = (&*w * 3.0)?; // a result of the tape, then a graph's input
    let read_before = h.exp()?.sum()?;
    let s = locus::Stream::<G>::new()?;
    let mut g = locus::Graph::capture(&s, &mut h, |h| h + 1.0)?;
    g.inputs_mut().copy_from_slice(&[5.0, 6.0])?;
    drop(g);
    let e = backward_err(read_before.backward());
    assert!(e.contains("`exp`") && e.contains("InputMut"), "{e}");
    Ok(())
}
