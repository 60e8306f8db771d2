//! Property tests of run-time placements: random sequences of ops over tensors on
//! random placements. An op of two `Dyn` operands (or of a static and a `Dyn` one)
//! fails with `DeviceMismatch` exactly when their placements differ, naming both;
//! otherwise it gives what the same op gives on statically placed tensors, values,
//! shape, device and errors alike.
//!
//! The placements are cpu, pinned and every CUDA device up to four (`LOCUS_HOST_DEVICES=4`
//! on the host backend); with one device, mismatches are between cpu, pinned and cuda:0.

use locus::{Cpu, Cuda, DeviceId, Dyn, Error, Pinned, StaticDevice, Tensor};
use proptest::prelude::*;

/// The placements under test.
fn placements() -> Vec<DeviceId> {
    // All four where there are four (LOCUS_HOST_DEVICES=4); the ones there are otherwise.
    locus::testing::needs_devices_for(4, "the placements cuda:0 to cuda:3").unwrap();
    let n = locus::device_count().unwrap().min(4);
    let mut all = vec![DeviceId::Cpu, DeviceId::Pinned];
    all.extend((0..n as u32).map(DeviceId::Cuda));
    all
}

#[derive(Clone, Copy, Debug)]
enum Binary {
    Add,
    Sub,
    Mul,
    Div,
    Matmul,
    Cat,
}

#[derive(Clone, Debug)]
enum Step {
    /// `pool[lhs] op pool[rhs]`, both `Dyn`.
    Binary(Binary, usize, usize),
    /// The same with the lhs as a static tensor of its own placement.
    Mixed(Binary, usize, usize),
    /// `pool[i].relu()` (kept) and `pool[i].sum()`.
    Relu(usize),
    /// The same, keeping nothing.
    Sum(usize),
    /// `pool[i].to_dyn(placement)`: moves on purpose.
    Move(usize, usize),
}

fn binary() -> impl Strategy<Value = Binary> {
    prop_oneof![
        Just(Binary::Add),
        Just(Binary::Sub),
        Just(Binary::Mul),
        Just(Binary::Div),
        Just(Binary::Matmul),
        Just(Binary::Cat),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    let i = 0..64usize;
    prop_oneof![
        4 => (binary(), i.clone(), i.clone()).prop_map(|(b, l, r)| Step::Binary(b, l, r)),
        2 => (binary(), i.clone(), i.clone()).prop_map(|(b, l, r)| Step::Mixed(b, l, r)),
        1 => i.clone().prop_map(Step::Relu),
        1 => i.clone().prop_map(Step::Sum),
        2 => (i, 0..8usize).prop_map(|(t, p)| Step::Move(t, p)),
    ]
}

/// A start tensor: a placement index and a 2x2 or 1x2 matrix of small integers (so
/// that every result is exact).
fn operand() -> impl Strategy<Value = (usize, bool, Vec<i8>)> {
    (0..8usize, any::<bool>(), proptest::collection::vec(-4i8..=4, 4))
}

/// What an op gave, comparable across the two paths. Values are compared as bits:
/// `0 / 0` gives the same NaN on both paths, and NaN != NaN.
#[derive(Debug, PartialEq)]
enum Outcome {
    Value { device: DeviceId, shape: Vec<usize>, values: Vec<u32> },
    Failed(Error),
}

fn bits(t: &Tensor<Dyn>) -> locus::Result<Vec<u32>> {
    Ok(t.to_vec()?.into_iter().map(f32::to_bits).collect())
}

fn outcome(r: locus::Result<Tensor<Dyn>>) -> Outcome {
    match r.and_then(|t| Ok((t.device(), t.shape().to_vec(), bits(&t)?))) {
        Ok((device, shape, values)) => Outcome::Value { device, shape, values },
        Err(e) => Outcome::Failed(e),
    }
}

fn apply<D, E>(op: Binary, a: &Tensor<D>, b: &Tensor<E>) -> locus::Result<Tensor<D>>
where
    D: locus::Device + locus::SamePlacement<E>,
    E: locus::Device,
{
    match op {
        Binary::Add => a + b,
        Binary::Sub => a - b,
        Binary::Mul => a * b,
        Binary::Div => a / b,
        Binary::Matmul => a.matmul(b),
        Binary::Cat => a.cat(b),
    }
}

fn op_name(op: Binary) -> &'static str {
    match op {
        Binary::Add => "add",
        Binary::Sub => "sub",
        Binary::Mul => "mul",
        Binary::Div => "div",
        Binary::Matmul => "matmul",
        Binary::Cat => "cat",
    }
}

/// The op on tensors statically typed for placement `D`, built from the operands' data.
fn static_path<D: StaticDevice>(op: Binary, a: &Tensor<Dyn>, b: &Tensor<Dyn>) -> locus::Result<Tensor<Dyn>> {
    let sa = Tensor::<D>::from_vec(a.to_vec()?, a.shape())?;
    let sb = Tensor::<D>::from_vec(b.to_vec()?, b.shape())?;
    Ok(apply(op, &sa, &sb)?.into_dyn())
}

/// `relu` then `sum` on a tensor statically typed for placement `D`.
fn static_unary<D: StaticDevice>(a: &Tensor<Dyn>) -> locus::Result<(Tensor<Dyn>, Tensor<Dyn>)> {
    let s = Tensor::<D>::from_vec(a.to_vec()?, a.shape())?;
    Ok((s.relu()?.into_dyn(), s.sum()?.into_dyn()))
}

/// The op with the lhs converted (checked, no copy) to the static type of its own
/// placement and the rhs left `Dyn`.
fn mixed_path<D: StaticDevice + locus::SamePlacement<Dyn>>(
    op: Binary,
    a: &Tensor<Dyn>,
    b: &Tensor<Dyn>,
) -> locus::Result<Tensor<Dyn>> {
    let sa: Tensor<D> = a.clone().try_into_device::<D>()?;
    Ok(apply(op, &sa, b)?.into_dyn())
}

/// Calls `f::<D>` for the static placement `D` of `id`.
macro_rules! on_static {
    ($id:expr, $f:ident($($arg:expr),*)) => {
        match $id {
            DeviceId::Cpu => $f::<Cpu>($($arg),*),
            DeviceId::Pinned => $f::<Pinned>($($arg),*),
            DeviceId::Cuda(0) => $f::<Cuda<0>>($($arg),*),
            DeviceId::Cuda(1) => $f::<Cuda<1>>($($arg),*),
            DeviceId::Cuda(2) => $f::<Cuda<2>>($($arg),*),
            DeviceId::Cuda(3) => $f::<Cuda<3>>($($arg),*),
            other => unreachable!("placements() stops at cuda:3, got {other}"),
        }
    };
}

fn check_binary(
    op: Binary,
    mixed: bool,
    a: &Tensor<Dyn>,
    b: &Tensor<Dyn>,
) -> Result<Option<Tensor<Dyn>>, TestCaseError> {
    let got = if mixed { on_static!(a.device(), mixed_path(op, a, b)) } else { apply(op, a, b) };
    if a.device() != b.device() {
        let expected = Error::DeviceMismatch { op: op_name(op), lhs: a.device(), rhs: b.device() };
        prop_assert_eq!(got.as_ref().err(), Some(&expected));
        let message = expected.to_string();
        prop_assert!(message.contains(&format!("lhs is on {}", a.device())), "{}", message);
        prop_assert!(message.contains(&format!("rhs is on {}", b.device())), "{}", message);
        return Ok(None);
    }
    let want = on_static!(a.device(), static_path(op, a, b));
    if let Err(Error::DeviceMismatch { .. }) = &got {
        prop_assert!(false, "{} of two tensors on {} failed with a mismatch: {:?}", op_name(op), a.device(), got);
    }
    let kept = got.as_ref().ok().cloned();
    prop_assert_eq!(outcome(got), outcome(want));
    Ok(kept)
}

fn run(start: Vec<(usize, bool, Vec<i8>)>, steps: Vec<Step>) -> Result<(), TestCaseError> {
    let places = placements();
    let mut pool: Vec<Tensor<Dyn>> = Vec::new();
    for (p, row, data) in start {
        let values: Vec<f32> = data.iter().map(|&v| f32::from(v)).collect();
        let (values, shape) = if row { (values[..2].to_vec(), vec![1, 2]) } else { (values, vec![2, 2]) };
        let device = places[p % places.len()];
        pool.push(Tensor::<Dyn>::from_vec_on(Dyn::new(device), values, shape).map_err(fail)?);
    }
    for s in steps {
        let pick = |i: usize| pool[i % pool.len()].clone();
        let made = match s {
            Step::Binary(op, l, r) => check_binary(op, false, &pick(l), &pick(r))?,
            Step::Mixed(op, l, r) => check_binary(op, true, &pick(l), &pick(r))?,
            Step::Relu(i) | Step::Sum(i) => {
                let t = pick(i);
                let (relu, sum) = (t.relu(), t.sum());
                let (want_relu, want_sum) = on_static!(t.device(), static_unary(&t)).map_err(fail)?;
                let kept = relu.as_ref().ok().cloned();
                prop_assert_eq!(outcome(relu), outcome(Ok(want_relu)));
                prop_assert_eq!(outcome(sum), outcome(Ok(want_sum)));
                if matches!(s, Step::Relu(_)) {
                    kept
                } else {
                    None
                }
            }
            Step::Move(i, p) => {
                let (t, to) = (pick(i), places[p % places.len()]);
                let r = t.to_dyn(to).map_err(fail)?;
                prop_assert_eq!(r.device(), to);
                prop_assert_eq!(bits(&r).map_err(fail)?, bits(&t).map_err(fail)?);
                Some(r)
            }
        };
        // Keep the pool small and 2-d, so that later ops keep meeting shapes they take.
        if let Some(t) = made.filter(|t| t.rank() == 2 && t.numel() <= 16) {
            pool.push(t);
        }
    }
    Ok(())
}

fn fail(e: Error) -> TestCaseError {
    TestCaseError::fail(format!("unexpected error: {e}"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_op_sequences_mismatch_exactly_when_placements_differ(
        start in proptest::collection::vec(operand(), 2..6),
        steps in proptest::collection::vec(step(), 1..24),
    ) {
        run(start, steps)?;
    }
}

#[test]
fn every_pair_of_placements_is_checked() -> Result<(), TestCaseError> {
    // Not random: every (lhs, rhs) placement pair once, so that each one is seen on
    // every run whatever the generator draws.
    let places = placements();
    for &l in &places {
        for &r in &places {
            let a = Tensor::<Dyn>::full_on(Dyn::new(l), [2, 2], 2.0).map_err(fail)?;
            let b = Tensor::<Dyn>::full_on(Dyn::new(r), [2, 2], 3.0).map_err(fail)?;
            for op in [Binary::Add, Binary::Sub, Binary::Mul, Binary::Div, Binary::Matmul, Binary::Cat] {
                for mixed in [false, true] {
                    let out = check_binary(op, mixed, &a, &b)?;
                    prop_assert_eq!(out.is_some(), l == r, "{:?} {} {}", op, l, r);
                }
            }
        }
    }
    Ok(())
}
