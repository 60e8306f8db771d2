//! The small ops (issue 22): a scalar on the left of `+ - * /`, `abs`, `square`, `pow`,
//! `clamp`, and `narrow`/`select`/`concat_dim`/`stack` along any dim, against
//! hand-computed values and plain loops over `Vec`s, on cuda:0 of the selected backend
//! and on the host placements; and the errors bad arguments give.

use locus::{Cpu, Cuda, DeviceId, Dyn, Element, Error, Tensor};
use proptest::prelude::*;

type G = Cuda<0>;

/// Values of every kind an element type has, with a length that is no multiple of a
/// vector width, so the GPU kernels' vector loop and tail both run.
fn sample<T: Element>(n: usize, f: impl Fn(usize) -> T) -> Vec<T> {
    (0..n).map(f).collect()
}

/// Checks `s op x` for every element of `x` against `want`, with `x` borrowed and owned.
macro_rules! check_scalar_left {
    ($t:ty, $s:expr, $xs:expr) => {{
        let xs: Vec<$t> = $xs;
        let s: $t = $s;
        let x = Tensor::<G, $t>::from_slice(&xs, [xs.len()])?;
        let add: Vec<$t> = xs.iter().map(|&v| Element::add(s, v)).collect();
        let sub: Vec<$t> = xs.iter().map(|&v| Element::sub(s, v)).collect();
        let mul: Vec<$t> = xs.iter().map(|&v| Element::mul(s, v)).collect();
        assert_eq!((s + &x)?.to_vec()?, add, "{} + x", stringify!($t));
        assert_eq!((s - &x)?.to_vec()?, sub, "{} - x", stringify!($t));
        assert_eq!((s * &x)?.to_vec()?, mul, "{} * x", stringify!($t));
        assert_eq!((s + x.clone())?.to_vec()?, add);
        assert_eq!((s - x.clone())?.to_vec()?, sub);
        assert_eq!((s * x.clone())?.to_vec()?, mul);
        let nonzero: Vec<$t> = xs.iter().map(|&v| if v == <$t>::ZERO { <$t>::ONE } else { v }).collect();
        let y = Tensor::<G, $t>::from_slice(&nonzero, [nonzero.len()])?;
        let div: Vec<$t> = nonzero.iter().map(|&v| Element::div(s, v).unwrap()).collect();
        assert_eq!((s / &y)?.to_vec()?, div, "{} / x", stringify!($t));
        assert_eq!((s / y)?.to_vec()?, div);
    }};
}

#[test]
fn scalar_on_the_left_for_every_dtype() -> locus::Result<()> {
    check_scalar_left!(f32, 1.5, sample(1003, |i| i as f32 * 0.25 - 100.0));
    check_scalar_left!(f64, -2.0, sample(37, |i| i as f64 * 1.5 - 20.0));
    check_scalar_left!(i32, 100, sample(1003, |i| i as i32 * 7 - 3000));
    check_scalar_left!(u8, 3, sample(301, |i| i as u8));
    Ok(())
}

#[test]
fn scalar_on_the_left_is_not_swapped() -> locus::Result<()> {
    let x = Tensor::<G>::from_vec(vec![0.25, 2.0, 4.0], [3])?;
    assert_eq!((1.0 - &x)?.to_vec()?, vec![0.75, -1.0, -3.0]);
    assert_eq!((2.0 / &x)?.to_vec()?, vec![8.0, 1.0, 0.5]);
    assert_eq!((2.0 * &x)?.to_vec()?, vec![0.5, 4.0, 8.0]);
    assert_eq!((1.0 + x)?.to_vec()?, vec![1.25, 3.0, 5.0]);
    let u = Tensor::<G, u8>::from_vec(vec![1, 3], [2])?;
    assert_eq!((2 - &u)?.to_vec()?, vec![1, 255], "u8 wraps");
    let i = Tensor::<Cpu, i32>::from_vec(vec![3, -4], [2])?;
    assert_eq!((7 / &i)?.to_vec()?, vec![2, -1], "truncates toward zero");
    let d = Tensor::<G>::from_vec(vec![1.0, 2.0], [2])?.into_dyn();
    assert_eq!((3.0 - &d)?.to_vec()?, vec![2.0, 1.0]);
    Ok(())
}

#[test]
fn scalar_on_the_left_divided_by_an_integer_zero_is_an_error() -> locus::Result<()> {
    let z = Tensor::<G, i32>::from_vec(vec![1, 0, 2], [3])?;
    assert!(matches!(5 / &z, Err(Error::InvalidArgument { op: "div", .. })));
    let z = Tensor::<G, u8>::from_vec(vec![0; 40], [40])?;
    assert!(matches!(5 / z, Err(Error::InvalidArgument { op: "div", .. })));
    let f = (1.0 / Tensor::<G>::from_vec(vec![0.0, -0.0], [2])?)?.to_vec()?;
    assert_eq!(f, vec![f32::INFINITY, f32::NEG_INFINITY], "floats follow IEEE");
    let empty = Tensor::<G, i32>::zeros([0])?;
    assert_eq!((1 / &empty)?.numel(), 0);
    Ok(())
}

#[test]
fn abs_and_square_for_every_dtype() -> locus::Result<()> {
    let f = sample(37, |i| i as f32 - 18.5);
    let x = Tensor::<G>::from_slice(&f, [37])?;
    assert_eq!(x.abs()?.to_vec()?, f.iter().map(|v| v.abs()).collect::<Vec<_>>());
    assert_eq!(x.square()?.to_vec()?, f.iter().map(|v| v * v).collect::<Vec<_>>());
    let d = Tensor::<G, f64>::from_vec(vec![-0.0, -1.5, f64::NEG_INFINITY, 2.0], [4])?;
    let a = d.abs()?.to_vec()?;
    assert_eq!(a, vec![0.0, 1.5, f64::INFINITY, 2.0]);
    assert!(a[0].is_sign_positive(), "abs(-0.0) is +0.0");
    assert_eq!(d.square()?.to_vec()?, vec![0.0, 2.25, f64::INFINITY, 4.0]);
    assert!(Tensor::<G>::full([3], f32::NAN)?.abs()?.to_vec()?.iter().all(|v| v.is_nan()));
    let i = Tensor::<G, i32>::from_vec(vec![-3, 0, 5, i32::MIN, 50_000], [5])?;
    assert_eq!(i.abs()?.to_vec()?, vec![3, 0, 5, i32::MIN, 50_000], "i32::MIN wraps");
    assert_eq!(i.square()?.to_vec()?, vec![9, 0, 25, 0, 50_000i32.wrapping_mul(50_000)]);
    let u = Tensor::<Cpu, u8>::from_vec(vec![0, 3, 16, 255], [4])?;
    assert_eq!(u.abs()?.to_vec()?, vec![0, 3, 16, 255]);
    assert_eq!(u.square()?.to_vec()?, vec![0, 9, 0, 1], "u8 wraps");
    Ok(())
}

#[test]
fn pow_of_floats() -> locus::Result<()> {
    let xs = sample(37, |i| i as f32 * 0.5);
    let x = Tensor::<G>::from_slice(&xs, [37])?;
    for e in [2.0f32, 0.5, -1.0, 3.3, 0.0] {
        let got = x.pow(e)?.to_vec()?;
        for (g, v) in got.iter().zip(&xs) {
            let want = v.powf(e);
            assert!((g - want).abs() <= 1e-5 * want.abs().max(1.0) || g == &want, "{v}^{e}: {g} vs {want}");
        }
    }
    let d = Tensor::<G, f64>::from_vec(vec![-8.0, 2.0, 0.0], [3])?;
    assert_eq!(d.pow(2.0)?.to_vec()?, vec![64.0, 4.0, 0.0]);
    assert!(d.pow(0.5)?.to_vec()?[0].is_nan(), "a negative base to a fractional power is NaN");
    assert_eq!(d.pow(0.0)?.to_vec()?, vec![1.0; 3]);
    Ok(())
}

#[test]
fn clamp_for_every_dtype() -> locus::Result<()> {
    let f = sample(37, |i| i as f32 - 18.0);
    let x = Tensor::<G>::from_slice(&f, [37])?;
    let want: Vec<f32> = f.iter().map(|v| v.clamp(-2.5, 3.0)).collect();
    assert_eq!(x.clamp(-2.5, 3.0)?.to_vec()?, want);
    let n = Tensor::<G, f64>::from_vec(vec![f64::NAN, -9.0, 9.0], [3])?.clamp(0.0, 1.0)?.to_vec()?;
    assert!(n[0].is_nan() && n[1..] == [0.0, 1.0], "NaN stays NaN: {n:?}");
    let i = Tensor::<G, i32>::from_vec(vec![-100, -1, 0, 7, 100], [5])?;
    assert_eq!(i.clamp(-1, 7)?.to_vec()?, vec![-1, -1, 0, 7, 7]);
    assert_eq!(i.clamp(3, 3)?.to_vec()?, vec![3; 5]);
    let u = Tensor::<G, u8>::from_slice(&sample(300, |i| i as u8), [300])?;
    let want: Vec<u8> = (0..300).map(|i| (i as u8).clamp(10, 200)).collect();
    assert_eq!(u.clamp(10, 200)?.to_vec()?, want);
    Ok(())
}

#[test]
fn clamp_with_min_above_max_is_an_error() -> locus::Result<()> {
    let x = Tensor::<G>::zeros([2])?;
    let err = x.clamp(1.0, 0.0).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "clamp", .. }));
    assert!(err.to_string().contains("min = 1.0"), "{err}");
    assert!(x.clamp(f32::NAN, 0.0).is_err(), "a NaN bound");
    assert!(Tensor::<Cpu, u8>::zeros([2])?.clamp(5, 4).is_err());
    Ok(())
}

/// The row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// The multi-index of flat index `i` in `shape`.
fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}

fn ravel(idx: &[usize], shape: &[usize]) -> usize {
    idx.iter().zip(strides(shape)).map(|(i, s)| i * s).sum()
}

/// `narrow` by the definition: out[.., j, ..] = x[.., start + j, ..].
fn ref_narrow(x: &[i32], shape: &[usize], dim: usize, start: usize, len: usize) -> Vec<i32> {
    let mut out_shape = shape.to_vec();
    out_shape[dim] = len;
    (0..out_shape.iter().product())
        .map(|i| {
            let mut idx = unravel(i, &out_shape);
            idx[dim] += start;
            x[ravel(&idx, shape)]
        })
        .collect()
}

/// `cat` by the definition: the part whose range along `dim` holds the index.
fn ref_cat(parts: &[(Vec<i32>, Vec<usize>)], dim: usize) -> Vec<i32> {
    let mut out_shape = parts[0].1.clone();
    out_shape[dim] = parts.iter().map(|p| p.1[dim]).sum();
    (0..out_shape.iter().product())
        .map(|i| {
            let mut idx = unravel(i, &out_shape);
            for (data, shape) in parts {
                if idx[dim] < shape[dim] {
                    return data[ravel(&idx, shape)];
                }
                idx[dim] -= shape[dim];
            }
            unreachable!("index past the last part")
        })
        .collect()
}

fn iota(shape: &[usize], base: i32) -> Vec<i32> {
    (0..shape.iter().product::<usize>()).map(|i| base + i as i32).collect()
}

#[test]
fn narrow_and_select_columns_of_a_matrix() -> locus::Result<()> {
    let m = Tensor::<G, i32>::from_vec(iota(&[3, 4], 0), [3, 4])?;
    assert_eq!(m.narrow(1, 1, 2)?.to_vec()?, vec![1, 2, 5, 6, 9, 10]);
    assert_eq!(m.narrow(0, 1, 2)?.to_vec()?, vec![4, 5, 6, 7, 8, 9, 10, 11]);
    assert_eq!(m.narrow(1, 4, 0)?.shape(), &[3, 0]);
    assert_eq!(m.select(1, 3)?.to_vec()?, vec![3, 7, 11]);
    assert_eq!(m.select(0, 2)?.to_vec()?, vec![8, 9, 10, 11]);
    let v = Tensor::<G>::from_vec(vec![1.0, 2.0, 3.0], [3])?;
    let s = v.select(0, 1)?;
    assert_eq!((s.shape(), s.item()?), (&[][..], 2.0));
    let d = m.into_dyn().narrow(1, 0, 1)?;
    assert_eq!((d.shape(), d.to_vec()?), (&[3, 1][..], vec![0, 4, 8]));
    Ok(())
}

#[test]
fn cat_and_stack_along_every_dim() -> locus::Result<()> {
    let a = Tensor::<G, i32>::from_vec(iota(&[2, 2], 0), [2, 2])?;
    let b = Tensor::<G, i32>::from_vec(iota(&[2, 1], 10), [2, 1])?;
    assert_eq!(a.cat_dim(&b, 1)?.to_vec()?, vec![0, 1, 10, 2, 3, 11]);
    assert_eq!(Tensor::concat_dim(&[&a, &a], 0)?.to_vec()?, Tensor::concat(&[&a, &a])?.to_vec()?);
    let s0 = Tensor::stack(&[&a, &a], 0)?;
    assert_eq!((s0.shape(), s0.to_vec()?), (&[2, 2, 2][..], vec![0, 1, 2, 3, 0, 1, 2, 3]));
    let b2 = (&a + 10)?;
    let s2 = Tensor::stack(&[&a, &b2], 2)?;
    assert_eq!((s2.shape(), s2.to_vec()?), (&[2, 2, 2][..], vec![0, 10, 1, 11, 2, 12, 3, 13]));
    let scalars = [Tensor::<Cpu>::full([], 1.0)?, Tensor::<Cpu>::full([], 2.0)?];
    assert_eq!(Tensor::stack(&[&scalars[0], &scalars[1]], 0)?.to_vec()?, vec![1.0, 2.0]);
    let e = Tensor::<G, i32>::zeros([2, 0])?;
    assert_eq!(a.cat_dim(&e, 1)?.to_vec()?, a.to_vec()?);
    let d = Tensor::concat_dim(&[&a.clone().into_dyn(), &b.clone().into_dyn()], 1)?;
    assert_eq!(d.to_vec()?, vec![0, 1, 10, 2, 3, 11]);
    assert_eq!(a.cat_dim(&b.into_dyn(), 1)?.shape(), &[2, 3], "a static and a Dyn operand");
    Ok(())
}

#[test]
fn layout_op_errors_name_the_op_and_shapes() -> locus::Result<()> {
    let m = Tensor::<G>::zeros([2, 3])?;
    let err = m.narrow(2, 0, 1).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "narrow", .. }));
    assert!(err.to_string().contains("[2, 3]"), "{err}");
    let err = m.narrow(1, 2, 2).unwrap_err();
    assert!(err.to_string().contains("2..2+2") && err.to_string().contains("[2, 3]"), "{err}");
    assert!(matches!(m.narrow(1, usize::MAX, 2), Err(Error::InvalidArgument { op: "narrow", .. })));
    assert!(matches!(m.select(0, 2), Err(Error::InvalidArgument { op: "select", .. })));
    assert!(matches!(m.select(5, 0), Err(Error::InvalidArgument { op: "select", .. })));
    let s = Tensor::<G>::full([], 1.0)?;
    assert!(matches!(s.narrow(0, 0, 1), Err(Error::InvalidArgument { op: "narrow", .. })));
    assert!(matches!(s.cat_dim(&s, 0), Err(Error::InvalidArgument { op: "cat", .. })));

    let n = Tensor::<G>::zeros([3, 3])?;
    let err = m.cat_dim(&n, 1).unwrap_err();
    assert_eq!(err, Error::ShapeMismatch { op: "cat", lhs: vec![2, 3], rhs: vec![3, 3] });
    assert!(m.cat_dim(&n, 0).is_ok());
    let r3 = Tensor::<G>::zeros([2, 3, 1])?;
    assert!(matches!(Tensor::concat_dim(&[&m, &r3.reshape([2, 3])?, &r3], 0), Err(Error::ShapeMismatch { .. })));
    assert!(matches!(m.cat_dim(&m, 2), Err(Error::InvalidArgument { op: "cat", .. })));
    let err = Tensor::stack(&[&m, &n], 0).unwrap_err();
    assert_eq!(err, Error::ShapeMismatch { op: "stack", lhs: vec![2, 3], rhs: vec![3, 3] });
    assert!(matches!(Tensor::stack(&[&m, &m], 3), Err(Error::InvalidArgument { op: "stack", .. })));
    assert!(Tensor::stack(&[&m, &m], 2).is_ok());
    let none: [&Tensor<G>; 0] = [];
    assert!(matches!(Tensor::stack(&none, 0), Err(Error::InvalidArgument { op: "stack", .. })));
    assert!(matches!(Tensor::concat_dim(&none, 0), Err(Error::InvalidArgument { op: "cat", .. })));
    Ok(())
}

#[test]
fn dyn_tensors_on_two_devices_do_not_cat_or_stack() -> locus::Result<()> {
    let a = Tensor::<Dyn>::zeros_on(Dyn::new(DeviceId::Cuda(0)), [2])?;
    let b = Tensor::<Dyn>::zeros_on(Dyn::new(DeviceId::Cpu), [2])?;
    let mismatch = Error::DeviceMismatch { op: "cat", lhs: DeviceId::Cuda(0), rhs: DeviceId::Cpu };
    assert_eq!(Tensor::concat_dim(&[&a, &b], 0).unwrap_err(), mismatch);
    assert_eq!(a.cat_dim(&b, 0).unwrap_err(), mismatch);
    let err = Tensor::stack(&[&a, &b], 0).unwrap_err();
    assert_eq!(err, Error::DeviceMismatch { op: "stack", lhs: DeviceId::Cuda(0), rhs: DeviceId::Cpu });
    Ok(())
}

/// A shape of rank 1..=4 with dims 0..=4, and a dim of it.
fn shape_and_dim() -> impl Strategy<Value = (Vec<usize>, usize)> {
    proptest::collection::vec(0usize..=4, 1..=4).prop_flat_map(|s| {
        let rank = s.len();
        (Just(s), 0..rank)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn narrow_matches_the_definition((shape, dim) in shape_and_dim(), a in 0usize..=4, b in 0usize..=4) {
        let size = shape[dim];
        let (start, len) = (a.min(size), b.min(size - a.min(size)));
        let x = iota(&shape, 0);
        let t = Tensor::<G, i32>::from_slice(&x, &shape).unwrap();
        let got = t.narrow(dim, start, len).unwrap();
        let mut want_shape = shape.clone();
        want_shape[dim] = len;
        prop_assert_eq!(got.shape(), &want_shape[..]);
        prop_assert_eq!(got.to_vec().unwrap(), ref_narrow(&x, &shape, dim, start, len));
        if start < size {
            let sel = t.select(dim, start).unwrap();
            let mut sel_shape = shape.clone();
            sel_shape.remove(dim);
            prop_assert_eq!(sel.shape(), &sel_shape[..]);
            prop_assert_eq!(sel.to_vec().unwrap(), ref_narrow(&x, &shape, dim, start, 1));
        } else {
            prop_assert!(t.select(dim, start).is_err());
        }
        prop_assert!(t.narrow(dim, start, size - start + 1).is_err());
    }

    #[test]
    fn cat_matches_the_definition((shape, dim) in shape_and_dim(), sizes in proptest::collection::vec(0usize..=3, 1..=4)) {
        let parts: Vec<(Vec<i32>, Vec<usize>)> = sizes
            .iter()
            .enumerate()
            .map(|(j, &n)| {
                let mut s = shape.clone();
                s[dim] = n;
                (iota(&s, 1000 * j as i32), s)
            })
            .collect();
        let tensors: Vec<Tensor<G, i32>> =
            parts.iter().map(|(d, s)| Tensor::from_slice(d, s).unwrap()).collect();
        let refs: Vec<&Tensor<G, i32>> = tensors.iter().collect();
        let got = Tensor::concat_dim(&refs, dim).unwrap();
        let mut want_shape = shape.clone();
        want_shape[dim] = sizes.iter().sum();
        prop_assert_eq!(got.shape(), &want_shape[..]);
        prop_assert_eq!(got.to_vec().unwrap(), ref_cat(&parts, dim));
        let on_cpu: Vec<Tensor<Cpu, i32>> = tensors.iter().map(|t| t.to::<Cpu>().unwrap()).collect();
        let cpu_refs: Vec<&Tensor<Cpu, i32>> = on_cpu.iter().collect();
        prop_assert_eq!(Tensor::concat_dim(&cpu_refs, dim).unwrap().to_vec().unwrap(), ref_cat(&parts, dim));
    }

    #[test]
    fn stack_is_cat_of_parts_with_a_new_dim(shape in proptest::collection::vec(0usize..=4, 0..=3), n in 1usize..=4, at in 0usize..=3) {
        let dim = at.min(shape.len());
        let mut unit = shape.clone();
        unit.insert(dim, 1);
        let parts: Vec<(Vec<i32>, Vec<usize>)> = (0..n).map(|j| (iota(&shape, 1000 * j as i32), unit.clone())).collect();
        let tensors: Vec<Tensor<G, i32>> =
            parts.iter().map(|(d, _)| Tensor::from_slice(d, &shape).unwrap()).collect();
        let refs: Vec<&Tensor<G, i32>> = tensors.iter().collect();
        let got = Tensor::stack(&refs, dim).unwrap();
        let mut want_shape = shape.clone();
        want_shape.insert(dim, n);
        prop_assert_eq!(got.shape(), &want_shape[..]);
        prop_assert_eq!(got.to_vec().unwrap(), ref_cat(&parts, dim));
    }
}

/// SplitMix64 of a counter and Box-Muller, written out again from the documented
/// definition (not the runtime's code): element `i` of `randn(seed)`, in f64.
fn ref_randn(seed: u64, i: u64) -> f64 {
    let bits = |j: u64| {
        let mut z = (seed ^ 0x6A09_E667_F3BC_C908).wrapping_add((j + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let k = i - i % 2;
    let u1 = ((bits(k) >> 11) + 1) as f64 / 2f64.powi(53);
    let u2 = (bits(k + 1) >> 11) as f64 / 2f64.powi(53);
    let (s, c) = (2.0 * std::f64::consts::PI * u2).sin_cos();
    (-2.0 * u1.ln()).sqrt() * if i % 2 == 0 { c } else { s }
}

/// Mean, standard deviation, and the shares beyond 1, 2 and 3 standard deviations.
fn moments(v: &[f64]) -> (f64, f64, [f64; 3]) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let std = (v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n).sqrt();
    let beyond = |k: f64| v.iter().filter(|x| x.abs() > k).count() as f64 / n;
    (mean, std, [beyond(1.0), beyond(2.0), beyond(3.0)])
}

#[test]
fn randn_is_standard_normal_for_every_float_type() -> locus::Result<()> {
    const N: usize = 200_003;
    let samples: [(&str, Vec<f64>); 4] = [
        ("f32", Tensor::<G>::randn([N], 3)?.to_vec()?.into_iter().map(f64::from).collect()),
        ("f64", Tensor::<G, f64>::randn([N], 3)?.to_vec()?),
        ("bf16", Tensor::<G, locus::bf16>::randn([N], 3)?.to_vec()?.into_iter().map(f64::from).collect()),
        ("f16", Tensor::<G, locus::f16>::randn([N], 3)?.to_vec()?.into_iter().map(f64::from).collect()),
    ];
    for (name, v) in &samples {
        let (mean, std, beyond) = moments(v);
        // The standard error of the mean is 1/√N ≈ 0.0022, of the std ≈ 0.0016.
        assert!(mean.abs() < 0.01, "{name}: mean {mean}");
        assert!((std - 1.0).abs() < 0.01, "{name}: std {std}");
        // The normal's tails: 31.73 %, 4.55 % and 0.27 % beyond 1, 2 and 3.
        for (got, want) in beyond.iter().zip([0.3173, 0.0455, 0.0027]) {
            assert!((got - want).abs() < 0.1 * want, "{name}: share beyond a bound {got}, want {want}");
        }
        assert!(v.iter().all(|x| x.is_finite() && x.abs() < 8.6), "{name}: a value out of range");
    }
    // The cosine and sine halves of each pair are uncorrelated.
    let v = &samples[1].1;
    let corr = v.chunks_exact(2).map(|p| p[0] * p[1]).sum::<f64>() / (N / 2) as f64;
    assert!(corr.abs() < 0.01, "pairs correlate: {corr}");
    Ok(())
}

#[test]
fn randn_is_reproducible_and_the_same_on_every_placement() -> locus::Result<()> {
    let a = Tensor::<G, f64>::randn([4, 1001], 11)?.to_vec()?;
    assert_eq!(a, Tensor::<G, f64>::randn([4, 1001], 11)?.to_vec()?, "the same seed twice");
    assert_ne!(a, Tensor::<G, f64>::randn([4, 1001], 12)?.to_vec()?, "another seed");
    // Element i depends on the seed and i alone: a prefix under another shape.
    assert_eq!(&a[..10], &Tensor::<G, f64>::randn([10], 11)?.to_vec()?[..]);
    // Not rand's bits again: a pair's squared radius would be -2 ln(u + 2^-53) of rand's u.
    let u = Tensor::<G, f64>::rand([8], 11)?.to_vec()?;
    for k in (0..8).step_by(2) {
        let (r2, reused) = (a[k] * a[k] + a[k + 1] * a[k + 1], -2.0 * (u[k] + 2f64.powi(-53)).ln());
        assert!((r2 - reused).abs() > 1e-9 * reused, "randn reuses rand's bits at pair {k}");
    }
    // The documented definition, on cuda:0 and on the host placements, to f64's last bits.
    let host_backend = locus::backend_name().is_ok_and(|b| b == "host");
    for (name, v) in [("cuda:0", a.clone()), ("cpu", Tensor::<Cpu, f64>::randn([4004], 11)?.to_vec()?)] {
        for (i, &x) in v.iter().enumerate() {
            let want = ref_randn(11, i as u64);
            assert!((x - want).abs() <= 1e-14 * want.abs().max(1.0), "{name}: element {i} is {x}, want {want}");
        }
    }
    let f = Tensor::<G>::randn([5000], 5)?.to_vec()?;
    let c = Tensor::<Cpu>::randn([5000], 5)?.to_vec()?;
    let d = Tensor::<Dyn>::randn_on(Dyn::new(DeviceId::Pinned), [5000], 5)?.to_vec()?;
    assert_eq!(c, d, "two host placements differ");
    let differ = f.iter().zip(&c).filter(|(a, b)| a != b).count();
    if host_backend {
        assert_eq!(differ, 0, "cuda:0 and cpu of the host backend differ");
    } else {
        // f64 math of two libraries, rounded to f32: a rare last-bit difference.
        assert!(differ <= 5, "{differ} of 5000 differ between the GPU and the host");
        assert!(f.iter().zip(&c).all(|(a, b)| (a - b).abs() <= 1e-6 * a.abs().max(1.0)));
    }
    assert_eq!(Tensor::<G>::randn([0, 3], 1)?.shape(), &[0, 3]);
    assert_eq!(Tensor::<G>::randn([], 1)?.to_vec()?.len(), 1);
    Ok(())
}

#[test]
fn unsqueeze_and_squeeze_move_dims_of_one() -> locus::Result<()> {
    let t = Tensor::<G, i32>::arange(0, 6, 1)?.reshape([2, 3])?;
    for (dim, shape) in [(0, [1, 2, 3]), (1, [2, 1, 3]), (2, [2, 3, 1])] {
        let u = t.unsqueeze(dim)?;
        assert_eq!(u.shape(), &shape, "unsqueeze({dim})");
        assert_eq!(u.to_vec()?, t.to_vec()?, "unsqueeze keeps the elements");
        let back = u.squeeze(dim)?;
        assert_eq!((back.shape(), back.to_vec()?), (&[2, 3][..], t.to_vec()?), "squeeze({dim}) undoes it");
    }
    // A dim that is not 1 stays, as PyTorch's squeeze(dim).
    assert_eq!(t.squeeze(0)?.shape(), &[2, 3]);
    assert_eq!(Tensor::<G>::zeros([1, 0, 1])?.squeeze(2)?.shape(), &[1, 0]);
    // 0-d: unsqueeze(0) makes [1], squeeze(0) leaves it.
    let s = Tensor::<Cpu>::full([], 2.5)?;
    assert_eq!((s.unsqueeze(0)?.shape(), s.squeeze(0)?.shape()), (&[1][..], &[][..]));
    assert_eq!(s.unsqueeze(0)?.squeeze(0)?.item()?, 2.5);
    let errors = [
        ("unsqueeze(3)", t.unsqueeze(3).err()),
        ("squeeze(2)", t.squeeze(2).err()),
        ("0-d squeeze(1)", s.squeeze(1).err()),
    ];
    for (what, e) in errors {
        let e = e.unwrap_or_else(|| panic!("{what} is no error"));
        assert!(matches!(e, Error::InvalidArgument { op: "unsqueeze" | "squeeze", .. }), "{what}: {e}");
        assert!(e.to_string().contains("out of range"), "{what}: {e}");
    }
    Ok(())
}

#[test]
fn one_hot_against_a_loop_for_several_element_types() -> locus::Result<()> {
    let idx: Vec<i32> = (0..2 * 3 * 5).map(|i| (i * 7 + 3) % 6).collect();
    let t = Tensor::<G, i32>::from_slice(&idx, [2, 3, 5])?;
    let want: Vec<i32> = idx.iter().flat_map(|&i| (0..6).map(move |c| i32::from(c == i))).collect();
    let f = t.one_hot::<f32>(6)?;
    assert_eq!(f.shape(), &[2, 3, 5, 6]);
    assert_eq!(f.to_vec()?, want.iter().map(|&v| v as f32).collect::<Vec<_>>());
    assert_eq!(t.one_hot::<i32>(6)?.to_vec()?, want);
    assert_eq!(t.one_hot::<u8>(6)?.to_vec()?, want.iter().map(|&v| v as u8).collect::<Vec<_>>());
    let b = t.to::<Cpu>()?.one_hot::<locus::bf16>(7)?;
    assert_eq!(b.shape(), &[2, 3, 5, 7], "more classes than indices use");
    assert_eq!(b.sum_dim(3, false)?.to_dtype::<f32>()?.to_vec()?, vec![1.0; 30]);
    // A 0-d index gives one row; an empty tensor gives no rows, of any class count.
    assert_eq!(Tensor::<G, i32>::full([], 1)?.one_hot::<f64>(3)?.to_vec()?, vec![0.0, 1.0, 0.0]);
    assert_eq!(Tensor::<G, i32>::zeros([0, 2])?.one_hot::<f32>(0)?.shape(), &[0, 2, 0]);
    Ok(())
}

#[test]
fn one_hot_of_an_index_out_of_range_is_an_error() -> locus::Result<()> {
    let cases: [(&[i32], usize, &str); 4] = [
        (&[0, 3, 1], 3, "index 3 is out of range for 3 classes"),
        (&[0, -1, 1], 3, "index -1 is out of range for 3 classes"),
        (&[i32::MIN], 3, "index -2147483648 is out of range"),
        (&[0], 0, "index 0 is out of range for 0 classes"),
    ];
    for (idx, n, want) in cases {
        let e = Tensor::<G, i32>::from_slice(idx, [idx.len()])?.one_hot::<f32>(n).expect_err(want);
        assert!(matches!(e, Error::InvalidArgument { op: "one_hot", .. }), "{e}");
        assert!(e.to_string().contains(want), "{e}");
    }
    let too_many = Tensor::<G, i32>::zeros([1])?.one_hot::<u8>(i32::MAX as usize + 1).unwrap_err();
    assert!(too_many.to_string().contains("at most i32::MAX"), "{too_many}");
    Ok(())
}

#[test]
fn debug_prints_the_values_as_pytorch_lays_them_out() -> locus::Result<()> {
    let t = Tensor::<G, i32>::arange(0, 12, 1)?.reshape([2, 2, 3])?;
    let want = "tensor([[[ 0,  1,  2],\n         [ 3,  4,  5]],\n\n        [[ 6,  7,  8],\n         [ 9, 10, 11]]], \
                device=cuda:0, dtype=i32, shape=[2, 2, 3])";
    assert_eq!(format!("{t:?}"), want);
    let f = Tensor::<Cpu>::from_vec(vec![1.5, -2.0, f32::NAN], [3])?;
    assert_eq!(format!("{f:?}"), "tensor([ 1.5, -2.0,  NaN], device=cpu, dtype=f32, shape=[3])");
    let d = Tensor::<Cpu, locus::bf16>::full([], locus::bf16::from_f32(0.5))?.to_dyn(DeviceId::Cuda(0))?;
    assert_eq!(format!("{d:?}"), "tensor(0.5, device=cuda:0, dtype=bf16, shape=[])");
    assert_eq!(format!("{:?}", Tensor::<G, u8>::zeros([0, 4])?), "tensor([], device=cuda:0, dtype=u8, shape=[0, 4])");
    // Up to 1000 elements all are shown, rows wrapped within 80 columns.
    let all = format!("{:?}", Tensor::<G, i32>::arange(0, 1000, 1)?);
    assert!(all.contains(" 999]") && !all.contains("..."), "{all}");
    assert!(all.lines().all(|l| l.len() <= 80 || l.contains("device=")), "{all}");
    Ok(())
}

#[test]
fn debug_of_a_large_tensor_shows_its_edges() -> locus::Result<()> {
    let t = Tensor::<G, i32>::arange(0, 10_000, 1)?.reshape([100, 100])?;
    let want = "tensor([[   0,    1,    2,  ...,   97,   98,   99],
        [ 100,  101,  102,  ...,  197,  198,  199],
        [ 200,  201,  202,  ...,  297,  298,  299],
        ...,
        [9700, 9701, 9702,  ..., 9797, 9798, 9799],
        [9800, 9801, 9802,  ..., 9897, 9898, 9899],
        [9900, 9901, 9902,  ..., 9997, 9998, 9999]], device=cuda:0, dtype=i32, shape=[100, 100])";
    assert_eq!(format!("{t:?}"), want);
    // A dim of 6 or fewer is kept whole; 1001 elements are summarised.
    let narrow = format!("{:?}", Tensor::<Cpu, i32>::arange(0, 1001 * 2, 1)?.reshape([2, 1001])?);
    assert!(narrow.starts_with("tensor([[   0,    1,    2,  ...,  998,  999, 1000],\n        [1001, "), "{narrow}");
    Ok(())
}

#[test]
fn debug_of_a_tensor_that_cannot_be_read_still_prints() -> locus::Result<()> {
    let s0 = locus::Stream::<G>::new()?;
    let mut x = Tensor::<G>::zeros([4])?;
    let mut text = String::new();
    locus::Graph::capture(&s0, &mut x, |x| {
        text = format!("{x:?}");
        Ok(())
    })?;
    assert!(text.starts_with("tensor(<values not read: ") && text.contains("cannot be captured"), "{text}");
    assert!(text.ends_with(", device=cuda:0, dtype=f32, shape=[4])"), "{text}");
    // A large tensor is cut down on its device, which a stream of another device refuses.
    if locus::testing::needs_devices_for(2, "the stream of another device")? {
        let big = Tensor::<G>::zeros([40, 40])?;
        let s1 = locus::Stream::<Cuda<1>>::new()?;
        let text = locus::on_stream(&s1, || Ok::<_, locus::Error>(format!("{big:?}")))?;
        assert!(text.starts_with("tensor(<values not read: narrow") && text.ends_with("shape=[40, 40])"), "{text}");
    }
    Ok(())
}
