//! The float activations (`log`, `tanh`, `sigmoid`, `gelu`, `gelu_tanh`) and the float
//! unary ops `sin` and `cos`, for f32, f64,
//! bf16 and f16, on cuda:0 of
//! the selected backend and on `Cpu` (the host kernels), each against the other and
//! against a plain-Rust f64 reference, on random tensors of rank 1 to 4 and on the
//! special values (NaN, infinities, -0.0, 0, negatives, ±100).
//!
//! Tolerances, as `|got - want| <= rtol * |want| + atol` (NaN must meet NaN, an infinity
//! the same infinity):
//! - f32: `rtol = 4e-6` (a few ulp: the GPU's `logf`, `tanhf`, `expf`, `erff` are within
//!   2 ulp, the host rounds an f64 result once); `atol = 2e-6 * max(1, |x|)` for the two
//!   GELUs, whose `1 + erf` / `1 + tanh` cancels for negative `x`, else `1e-7` (sigmoid's
//!   subnormal tail, log near 1).
//! - bf16 and f16 (computed in f32 on the GPU and rounded once, in f64 on the host):
//!   `rtol` of two of their ulps, `8e-3` and `2e-3`, and f32's `atol`.
//! - f64: `rtol = 1e-12`; `atol = 2e-9 * max(1, |x|)` for `gelu`, the reference's error
//!   (its erf is a Maclaurin series below 4.5, whose cancellation costs up to 3e-10, and
//!   an asymptotic series above), `1e-13 * max(1, |x|)` for `gelu_tanh`, else `1e-15`.
//!
//! On the host backend cuda:0 and `Cpu` run the same kernels, so they must agree exactly
//! there; on a GPU they agree within the tolerance above.

use locus::{bf16, f16, Cpu, Cuda, DType, Float, Tensor};
use proptest::prelude::*;

type G = Cuda<0>;

#[derive(Clone, Copy, Debug)]
enum Act {
    Log,
    Tanh,
    Sigmoid,
    Gelu,
    GeluTanh,
    Sin,
    Cos,
}

const ALL: [Act; 7] = [Act::Log, Act::Tanh, Act::Sigmoid, Act::Gelu, Act::GeluTanh, Act::Sin, Act::Cos];

/// erf by definitions independent of the host backend's (which sums a series of
/// positive terms and a continued fraction): the alternating Maclaurin series below 4.5,
/// the asymptotic series of erfc above, stopped at its smallest term.
fn ref_erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    let a = x.abs();
    let r = if a < 4.5 {
        // erf(a) = 2/√π Σ (-1)^n a^(2n+1) / (n! (2n+1))
        let (mut p, mut sum, mut n) = (a, a, 0.0);
        loop {
            n += 1.0;
            p *= -a * a / n;
            let term = p / (2.0 * n + 1.0);
            sum += term;
            if term.abs() <= 1e-17 * sum.abs() {
                break;
            }
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else if a < 30.0 {
        // erfc(a) = e^(-a²) / (a √π) Σ (-1)^n (2n-1)!! / (2a²)^n
        let (mut term, mut sum, mut n) = (1.0f64, 1.0, 0.0);
        loop {
            n += 1.0;
            let next = -term * (2.0 * n - 1.0) / (2.0 * a * a);
            if next.abs() >= term.abs() || next.abs() < 1e-17 {
                break;
            }
            term = next;
            sum += term;
        }
        1.0 - (-a * a).exp() / (a * std::f64::consts::PI.sqrt()) * sum
    } else {
        1.0
    };
    r.copysign(x)
}

/// The activation in f64, by its textbook formula.
fn reference(act: Act, x: f64) -> f64 {
    match act {
        Act::Log => x.ln(),
        Act::Tanh => x.tanh(),
        // Naive, and right in f64 for every input here: exp(-x) overflows to inf only
        // where the true value is below f64's range anyway.
        Act::Sigmoid => 1.0 / (1.0 + (-x).exp()),
        Act::Gelu => 0.5 * x * (1.0 + ref_erf(x / 2f64.sqrt())),
        Act::GeluTanh => 0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh()),
        Act::Sin => x.sin(),
        Act::Cos => x.cos(),
    }
}

/// `(rtol, atol)` for `act` at input `x` in `T` (see the module doc).
fn tolerance<T: Float>(act: Act, x: f64) -> (f64, f64) {
    let scale = x.abs().max(1.0);
    // The 16-bit types are computed in f32 on the GPU, rounded once: two of their ulps
    // (2^-8 for bf16, 2^-10 for f16, relative), plus f32's absolute error where it counts.
    let rtol = match T::DTYPE {
        DType::BF16 => 8e-3,
        DType::F16 => 2e-3,
        DType::F32 => 4e-6,
        _ => 1e-12,
    };
    match (T::DTYPE, act) {
        (DType::F64, Act::Gelu) => (rtol, 2e-9 * scale),
        (DType::F64, Act::GeluTanh) => (rtol, 1e-13 * scale),
        (DType::F64, _) => (rtol, 1e-15),
        (_, Act::Gelu | Act::GeluTanh) => (rtol, 2e-6 * scale),
        _ => (rtol, 1e-7),
    }
}

fn close(got: f64, want: f64, (rtol, atol): (f64, f64)) -> bool {
    if want.is_nan() || got.is_nan() {
        return want.is_nan() && got.is_nan();
    }
    if want.is_infinite() || got.is_infinite() {
        return got == want;
    }
    (got - want).abs() <= rtol * want.abs() + atol
}

fn apply<D: locus::Device, T: Float>(act: Act, t: &Tensor<D, T>) -> locus::Result<Tensor<D, T>> {
    match act {
        Act::Log => t.log(),
        Act::Tanh => t.tanh(),
        Act::Sigmoid => t.sigmoid(),
        Act::Gelu => t.gelu(),
        Act::GeluTanh => t.gelu_tanh(),
        Act::Sin => t.sin(),
        Act::Cos => t.cos(),
    }
}

/// Runs `act` on `xs` (of `shape`) on cuda:0 and on `Cpu`; checks the shapes, each result
/// against the reference and the two against each other. `Err` names the first bad element.
fn check<T: Float>(act: Act, xs: &[T], shape: &[usize]) -> Result<(), String> {
    let run = || -> locus::Result<(Tensor<G, T>, Tensor<Cpu, T>)> {
        let g = apply(act, &Tensor::<G, T>::from_slice(xs, shape)?)?;
        let c = apply(act, &Tensor::<Cpu, T>::from_slice(xs, shape)?)?;
        Ok((g, c))
    };
    let (g, c) = run().map_err(|e| format!("{act:?}: {e}"))?;
    if g.shape() != shape || c.shape() != shape {
        return Err(format!("{act:?}: shapes {:?} and {:?} for {shape:?}", g.shape(), c.shape()));
    }
    let (gv, cv) = (g.to_vec().map_err(|e| e.to_string())?, c.to_vec().map_err(|e| e.to_string())?);
    let host_backend = locus::backend_name().is_ok_and(|b| b == "host");
    for (i, &x) in xs.iter().enumerate() {
        let x = x.to_f64();
        let want = T::from_f64(reference(act, x)).to_f64();
        let tol = tolerance::<T>(act, x);
        let (gi, ci) = (gv[i].to_f64(), cv[i].to_f64());
        if !close(gi, want, tol) || !close(ci, want, tol) || !close(gi, ci, tol) {
            return Err(format!("{act:?}({x:e}) in {}: cuda:0 {gi:e}, cpu {ci:e}, reference {want:e}", T::DTYPE));
        }
        if host_backend && gv[i].to_f64().to_bits() != cv[i].to_f64().to_bits() {
            return Err(format!("{act:?}({x:e}): the host backend's cuda:0 and cpu differ: {gi:e} {ci:e}"));
        }
    }
    Ok(())
}

/// A shape of rank 1 to 4 with dims 0 to 5, and that many values drawn from `value`.
fn tensor_of<T: std::fmt::Debug + Clone + 'static>(
    value: impl Strategy<Value = T> + Clone + 'static,
) -> impl Strategy<Value = (Vec<usize>, Vec<T>)> {
    proptest::collection::vec(0usize..=5, 1..=4).prop_flat_map(move |shape| {
        let n = shape.iter().product::<usize>();
        (Just(shape), proptest::collection::vec(value.clone(), n))
    })
}

/// Values where each activation does something different: around 0, around the GELU's
/// bend, large, and the special values.
fn value_f64() -> impl Strategy<Value = f64> + Clone {
    prop_oneof![
        6 => -8.0f64..8.0,
        2 => -120.0f64..120.0,
        1 => prop_oneof![
            Just(0.0),
            Just(-0.0),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(f64::NAN),
            Just(1e-30),
            Just(-1e-30),
            Just(1e30),
            Just(-1e30),
            Just(1.0),
        ],
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn activations_of_f32_agree_with_the_reference((shape, xs) in tensor_of(value_f64().prop_map(|v| v as f32))) {
        for act in ALL {
            if let Err(e) = check::<f32>(act, &xs, &shape) {
                prop_assert!(false, "{}", e);
            }
        }
    }

    #[test]
    fn activations_of_f64_agree_with_the_reference((shape, xs) in tensor_of(value_f64())) {
        for act in ALL {
            if let Err(e) = check::<f64>(act, &xs, &shape) {
                prop_assert!(false, "{}", e);
            }
        }
    }

    #[test]
    fn activations_of_bf16_agree_with_the_reference((shape, xs) in tensor_of(value_f64().prop_map(bf16::from_f64))) {
        for act in ALL {
            if let Err(e) = check::<bf16>(act, &xs, &shape) {
                prop_assert!(false, "{}", e);
            }
        }
    }

    #[test]
    fn activations_of_f16_agree_with_the_reference((shape, xs) in tensor_of(value_f64().prop_map(f16::from_f64))) {
        for act in ALL {
            if let Err(e) = check::<f16>(act, &xs, &shape) {
                prop_assert!(false, "{}", e);
            }
        }
    }
}

/// Long enough for the GPU kernels' vector loop and their tail to both run.
#[test]
fn activations_over_a_long_ramp() {
    let xs32: Vec<f32> = (0..10_007).map(|i| (i as f32 - 5000.0) * 0.0023).collect();
    let xs64: Vec<f64> = (0..4_099).map(|i| (i as f64 - 2000.0) * 0.0061).collect();
    let b: Vec<bf16> = xs32.iter().map(|&x| bf16::from_f32(x)).collect();
    let h: Vec<f16> = xs32.iter().map(|&x| f16::from_f32(x)).collect();
    for act in ALL {
        check::<f32>(act, &xs32, &[xs32.len()]).unwrap();
        check::<f64>(act, &xs64, &[xs64.len()]).unwrap();
        check::<bf16>(act, &b, &[b.len()]).unwrap();
        check::<f16>(act, &h, &[h.len()]).unwrap();
    }
}

#[test]
fn log_of_zero_negatives_and_infinity() -> locus::Result<()> {
    let x = Tensor::<G>::from_vec(vec![0.0, -0.0, -1.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1.0], [7])?;
    for l in [x.log()?.to_vec()?, x.to::<Cpu>()?.log()?.to_vec()?] {
        assert_eq!(&l[..2], &[f32::NEG_INFINITY; 2], "log(±0) is -inf");
        assert!(l[2].is_nan() && l[4].is_nan() && l[5].is_nan(), "log of a negative or NaN is NaN: {l:?}");
        assert_eq!((l[3], l[6]), (f32::INFINITY, 0.0));
    }
    let d = Tensor::<G, f64>::from_vec(vec![0.0, -2.0, std::f64::consts::E], [3])?.log()?.to_vec()?;
    assert!(d[0] == f64::NEG_INFINITY && d[1].is_nan() && (d[2] - 1.0).abs() < 1e-15, "{d:?}");
    Ok(())
}

#[test]
fn sigmoid_is_stable_at_large_magnitudes() -> locus::Result<()> {
    let x = Tensor::<G>::from_vec(vec![100.0, -100.0, 1e30, -1e30, f32::INFINITY, f32::NEG_INFINITY, 0.0], [7])?;
    for s in [x.sigmoid()?.to_vec()?, x.to::<Cpu>()?.sigmoid()?.to_vec()?] {
        assert_eq!(s[0], 1.0);
        // e^-100 = 3.7e-44, a subnormal f32: not 0, not NaN (1 / inf would be 0).
        assert!(s[1] > 0.0 && s[1] < 1e-43, "sigmoid(-100) = {:e}", s[1]);
        assert_eq!(&s[2..], &[1.0, 0.0, 1.0, 0.0, 0.5]);
    }
    let d = Tensor::<G, f64>::from_vec(vec![-100.0, 100.0, -800.0, 800.0], [4])?;
    for s in [d.sigmoid()?.to_vec()?, d.to::<Cpu>()?.sigmoid()?.to_vec()?] {
        let e = (-100f64).exp();
        assert!((s[0] - e).abs() <= 1e-12 * e, "sigmoid(-100) = {:e}, want {e:e}", s[0]);
        assert_eq!(&s[1..], &[1.0, 0.0, 1.0]);
    }
    assert!(Tensor::<G>::full([3], f32::NAN)?.sigmoid()?.to_vec()?.iter().all(|v| v.is_nan()));
    Ok(())
}

#[test]
fn tanh_and_gelu_special_values() -> locus::Result<()> {
    let x = Tensor::<G>::from_vec(vec![-0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 0.0], [5])?;
    for t in [x.tanh()?.to_vec()?, x.to::<Cpu>()?.tanh()?.to_vec()?] {
        assert!(t[0] == 0.0 && t[0].is_sign_negative(), "tanh(-0.0) is -0.0");
        assert_eq!(&t[1..3], &[1.0, -1.0]);
        assert!(t[3].is_nan());
    }
    for g in [x.gelu()?, x.gelu_tanh()?, x.to::<Cpu>()?.gelu()?.to::<G>()?, x.to::<Cpu>()?.gelu_tanh()?.to::<G>()?] {
        let g = g.to_vec()?;
        assert_eq!((g[0], g[1], g[4]), (0.0, f32::INFINITY, 0.0));
        // 0.5 * -inf * (1 + erf(-inf)) is -inf * 0: NaN, as the formula (and PyTorch) gives.
        assert!(g[2].is_nan() && g[3].is_nan(), "{g:?}");
    }
    // Far below the bend GELU is (-)0, far above it is x.
    let far = Tensor::<G, f64>::from_vec(vec![-40.0, 40.0, 1e10], [3])?;
    for g in [far.gelu()?.to_vec()?, far.gelu_tanh()?.to_vec()?] {
        assert!(g[0].abs() < 1e-300 && g[1] == 40.0 && g[2] == 1e10, "{g:?}");
    }
    Ok(())
}

#[test]
fn sin_and_cos_special_values() -> locus::Result<()> {
    let x = Tensor::<G>::from_vec(vec![0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN], [5])?;
    for (s, c) in
        [(x.sin()?.to_vec()?, x.cos()?.to_vec()?), (x.to::<Cpu>()?.sin()?.to_vec()?, x.to::<Cpu>()?.cos()?.to_vec()?)]
    {
        assert!(
            s[0] == 0.0 && s[0].is_sign_positive() && s[1] == 0.0 && s[1].is_sign_negative(),
            "sin(±0) is ±0: {s:?}"
        );
        assert_eq!(&c[..2], &[1.0, 1.0]);
        assert!(s[2..].iter().chain(&c[2..]).all(|v| v.is_nan()), "sin and cos of ±inf and NaN are NaN: {s:?} {c:?}");
    }
    // A large argument keeps its accuracy (full range reduction, not a fast intrinsic).
    let big = Tensor::<G, f64>::from_vec(vec![1e6, 1e15], [2])?;
    for (s, want) in big.sin()?.to_vec()?.into_iter().zip([1e6f64.sin(), 1e15f64.sin()]) {
        assert!((s - want).abs() <= 1e-12, "sin of a large argument: {s} against {want}");
    }
    Ok(())
}

#[test]
fn activations_keep_the_shape_and_the_placement() -> locus::Result<()> {
    let empty = Tensor::<G>::zeros([3, 0, 2])?;
    assert_eq!(empty.gelu()?.shape(), &[3, 0, 2]);
    let s = Tensor::<G, f64>::full([], 2.0)?.log()?;
    assert_eq!((s.shape(), s.item()?), (&[][..], 2f64.ln()));
    let d = Tensor::<G>::ones([2, 2])?.into_dyn().tanh()?;
    assert_eq!(d.device().to_string(), "cuda:0");
    assert_eq!(d.to_vec()?, vec![1f32.tanh(); 4]);
    Ok(())
}
