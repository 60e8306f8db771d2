//! The 16-bit float element types `bf16` and `f16` (issue 20) and `to_dtype` between
//! every pair of element types, on cuda:0 of the selected backend and on the host
//! placements, against plain Rust over `half`'s conversions: each op is computed in f32
//! and rounded once to nearest, ties to even; a conversion follows Rust's `as` (float to
//! integer truncates and saturates, NaN becomes 0; integer to integer wraps) and rounds
//! once to a float type.

use locus::{bf16, f16, Cpu, Cuda, DType, Element, Float, Scalar, Tensor};
use proptest::prelude::*;

type G = Cuda<0>;

/// Equal as values, with the same sign of zero; any NaN matches any NaN.
fn same<T: Element>(got: &[T], want: &[T], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (g.to_f64(), w.to_f64());
        let ok = if w.is_nan() { g.is_nan() } else { g.to_bits() == w.to_bits() };
        assert!(ok, "{what}: element {i} is {g:e}, want {w:e}");
    }
}

/// Within `ulps` units in the last place of a 16-bit type of `mantissa` bits (NaN
/// matches NaN, infinities must agree).
fn close<T: Element>(got: &[T], want: &[T], mantissa: i32, ulps: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (g.to_f64(), w.to_f64());
        let ok = if w.is_nan() || w.is_infinite() {
            g.to_bits() == w.to_bits() || (w.is_nan() && g.is_nan())
        } else {
            (g - w).abs() <= ulps * w.abs().max(f64::MIN_POSITIVE) * 2f64.powi(-mantissa + 1)
        };
        assert!(ok, "{what}: element {i} is {g:e}, want {w:e}");
    }
}

/// Values of every kind a 16-bit type has (zeros, subnormals, normals of both signs,
/// the largest, infinities, NaN), in a length that is no multiple of a vector width.
fn samples<T: Element>() -> Vec<T> {
    let mut v: Vec<T> = [0.0, -0.0, 1.0, -1.0, 0.5, 2.5, -3.75, 1e-6, -7e-8, 1e-39, 100.0, 65504.0, 3e38]
        .iter()
        .chain(&[f64::INFINITY, f64::NEG_INFINITY, f64::NAN])
        .map(|&x| T::from_f64(x))
        .collect();
    v.extend((0..990).map(|i| T::from_f64((i as f64 - 495.0) * 0.173)));
    v
}

fn f32_op<T: Element>(a: T, b: T, f: impl Fn(f32, f32) -> f32) -> T {
    T::from_f64(f64::from(f(a.to_f64() as f32, b.to_f64() as f32)))
}

/// `+ - * /` of two tensors, with a scalar on either side, and broadcast, on `G` and on
/// `Cpu`, against `f(a as f32, b as f32)` rounded once.
fn check_binary<T: Element + Float>(name: &str) -> locus::Result<()> {
    let a = samples::<T>();
    let b: Vec<T> = a.iter().rev().copied().collect();
    let (ga, gb) = (Tensor::<G, T>::from_slice(&a, [a.len()])?, Tensor::<G, T>::from_slice(&b, [b.len()])?);
    let (ca, cb) = (ga.to::<Cpu>()?, gb.to::<Cpu>()?);
    type F32Op = fn(f32, f32) -> f32;
    let ops: [(&str, F32Op); 4] =
        [("add", |x, y| x + y), ("sub", |x, y| x - y), ("mul", |x, y| x * y), ("div", |x, y| x / y)];
    for (op, f) in ops {
        let want: Vec<T> = a.iter().zip(&b).map(|(&x, &y)| f32_op(x, y, f)).collect();
        let (g, c) = match op {
            "add" => ((&ga + &gb)?, (&ca + &cb)?),
            "sub" => ((&ga - &gb)?, (&ca - &cb)?),
            "mul" => ((&ga * &gb)?, (&ca * &cb)?),
            _ => ((&ga / &gb)?, (&ca / &cb)?),
        };
        same(&g.to_vec()?, &want, &format!("{name} {op} on cuda:0"));
        same(&c.to_vec()?, &want, &format!("{name} {op} on cpu"));
    }
    // [3, 1] + [1, 4]
    let (r, c) = (&a[..3], &a[20..24]);
    let gr = Tensor::<G, T>::from_slice(r, [3, 1])?;
    let gc = Tensor::<G, T>::from_slice(c, [1, 4])?;
    let want: Vec<T> = r.iter().flat_map(|&x| c.iter().map(move |&y| f32_op(x, y, |x, y| x + y))).collect();
    same(&(&gr + &gc)?.to_vec()?, &want, &format!("{name} broadcast add"));
    Ok(())
}

#[test]
fn arithmetic_of_16_bit_floats_is_f32_rounded_once() -> locus::Result<()> {
    check_binary::<bf16>("bf16")?;
    check_binary::<f16>("f16")?;
    // A scalar on either side.
    let a = samples::<bf16>();
    let (ga, s) = (Tensor::<G, bf16>::from_slice(&a, [a.len()])?, bf16::from_f32(0.3));
    let want: Vec<bf16> = a.iter().map(|&x| f32_op(x, s, |x, y| x * y)).collect();
    same(&(&ga * s)?.to_vec()?, &want, "bf16 x * s");
    let want: Vec<bf16> = a.iter().map(|&x| f32_op(s, x, |x, y| x - y)).collect();
    same(&(s - &ga)?.to_vec()?, &want, "bf16 s - x");
    let h = Tensor::<Cpu, f16>::from_slice(&samples::<f16>(), [samples::<f16>().len()])?;
    let want: Vec<f16> = samples::<f16>().iter().map(|&x| f32_op(f16::from_f32(2.0), x, |x, y| x / y)).collect();
    same(&(f16::from_f32(2.0) / &h)?.to_vec()?, &want, "f16 s / x on cpu");
    Ok(())
}

fn check_unary<T: Float>(name: &str, mantissa: i32) -> locus::Result<()> {
    let a = samples::<T>();
    let g = Tensor::<G, T>::from_slice(&a, [a.len()])?;
    let c = g.to::<Cpu>()?;
    let map =
        |f: fn(f32) -> f32| -> Vec<T> { a.iter().map(|&x| T::from_f64(f64::from(f(x.to_f64() as f32)))).collect() };
    for t in [&g, &c.to::<G>()?] {
        same(&(-t)?.to_vec()?, &map(|x| -x), &format!("{name} neg"));
        same(&t.relu()?.to_vec()?, &map(|x| if x < 0.0 { 0.0 } else { x }), &format!("{name} relu"));
        same(&t.abs()?.to_vec()?, &map(f32::abs), &format!("{name} abs"));
        same(&t.square()?.to_vec()?, &map(|x| x * x), &format!("{name} square"));
        let (lo, hi) = (T::from_f64(-2.0), T::from_f64(3.5));
        same(&t.clamp(lo, hi)?.to_vec()?, &map(|x| x.clamp(-2.0, 3.5)), "clamp");
        close(&t.exp()?.to_vec()?, &map(f32::exp), mantissa, 1.0, &format!("{name} exp"));
        close(&t.sqrt()?.to_vec()?, &map(f32::sqrt), mantissa, 1.0, &format!("{name} sqrt"));
        close(&t.pow(T::from_f64(1.5))?.to_vec()?, &map(|x| x.powf(1.5)), mantissa, 1.0, &format!("{name} pow"));
    }
    // The host's own kernels give the same.
    same(&c.relu()?.to_vec()?, &map(|x| if x < 0.0 { 0.0 } else { x }), &format!("{name} relu on cpu"));
    close(&c.exp()?.to_vec()?, &map(f32::exp), mantissa, 1.0, &format!("{name} exp on cpu"));
    Ok(())
}

#[test]
fn unary_ops_of_16_bit_floats() -> locus::Result<()> {
    check_unary::<bf16>("bf16", 8)?;
    check_unary::<f16>("f16", 11)
}

fn check_reduce<T: Float>(name: &str) -> locus::Result<()> {
    // Multiples of 1/64 below 8: every f64 partial sum of them is exact, in any order,
    // so the one rounding at the end gives the same bits on every backend.
    let a: Vec<T> = (0..3000).map(|i| T::from_f64(((i * 37) % 1001) as f64 / 64.0 - 7.8125)).collect();
    let exact: f64 = a.iter().map(|v| v.to_f64()).sum();
    for t in [Tensor::<G, T>::from_slice(&a, [3000])?.into_dyn(), Tensor::<Cpu, T>::from_slice(&a, [3000])?.into_dyn()]
    {
        same(&[t.sum()?.item()?], &[T::from_f64(exact)], &format!("{name} sum on {}", t.device()));
        same(&[t.mean()?.item()?], &[T::from_f64(exact / 3000.0)], &format!("{name} mean on {}", t.device()));
        let max = a.iter().fold(f64::NEG_INFINITY, |m, v| m.max(v.to_f64()));
        same(&[t.max()?.item()?], &[T::from_f64(max)], &format!("{name} max on {}", t.device()));
        let rows = t.reshape([30, 100])?;
        let want: Vec<T> =
            (0..30).map(|r| T::from_f64(a[r * 100..(r + 1) * 100].iter().map(|v| v.to_f64()).sum())).collect();
        same(&rows.sum_dim(1, false)?.to_vec()?, &want, &format!("{name} sum_dim(1)"));
        let want: Vec<T> = (0..100).map(|c| T::from_f64((0..30).map(|r| a[r * 100 + c].to_f64()).sum())).collect();
        same(&rows.sum_dim(0, false)?.to_vec()?, &want, &format!("{name} sum_dim(0)"));
    }
    let nan = Tensor::<G, T>::from_vec(vec![T::ONE, T::from_f64(f64::NAN), T::from_f64(5.0)], [3])?;
    assert!(nan.max()?.item()?.to_f64().is_nan(), "{name}: NaN wins max");
    let neg = Tensor::<G, T>::from_vec(vec![T::from_f64(-5.0), T::from_f64(-3.0)], [2])?;
    assert_eq!(neg.max()?.item()?.to_f64(), -3.0, "{name}: max of negatives (no 0 start)");
    Ok(())
}

#[test]
fn reductions_of_16_bit_floats_accumulate_wide_and_round_once() -> locus::Result<()> {
    check_reduce::<bf16>("bf16")?;
    check_reduce::<f16>("f16")
}

#[test]
fn factories_and_layout_ops_of_16_bit_floats() -> locus::Result<()> {
    // rand: the same bits for a seed on every placement, in [0, 1), not constant.
    let g = Tensor::<G, bf16>::rand([4099], 7)?.to_vec()?;
    assert_eq!(g, Tensor::<Cpu, bf16>::rand([4099], 7)?.to_vec()?);
    assert!(g.iter().all(|v| (0.0..1.0).contains(&v.to_f32())));
    assert!(g.iter().any(|&v| v != g[0]));
    let h = Tensor::<G, f16>::rand([513], 8)?.to_vec()?;
    assert_eq!(h, Tensor::<Cpu, f16>::rand([513], 8)?.to_vec()?);
    assert!(h.iter().all(|v| (0.0..1.0).contains(&v.to_f32())));
    // arange rounds each value once: 257 is a tie in bf16 and goes to the even 256.
    let want: Vec<bf16> = (0..300).map(|i| bf16::from_f64(i as f64)).collect();
    let ar = Tensor::<G, bf16>::arange(bf16::from_f32(0.0), bf16::from_f32(300.0), bf16::from_f32(1.0))?.to_vec()?;
    assert_eq!(ar.len(), 300);
    assert_eq!(ar, want);
    assert_eq!(ar[257], bf16::from_f32(256.0));
    // fill, transpose, cat, narrow move the bits unchanged.
    let v: Vec<f16> = (0..35).map(|i| f16::from_f32(i as f32 * 0.1 - 1.0)).collect();
    let t = Tensor::<G, f16>::from_slice(&v, [5, 7])?;
    let tt = t.t()?.to_vec()?;
    assert_eq!(tt[1], v[7]);
    assert_eq!(tt, Tensor::<Cpu, f16>::from_slice(&v, [5, 7])?.t()?.to_vec()?);
    let both = t.cat(&t)?.narrow(0, 4, 2)?.to_vec()?;
    assert_eq!(both[..7], v[28..]);
    assert_eq!(both[7..], v[..7]);
    assert_eq!(Tensor::<G, f16>::full([3], f16::from_f32(0.1))?.to_vec()?, vec![f16::from_f32(0.1); 3]);
    Ok(())
}

/// i64 values no other type's list reaches: the extremes, their neighbours, values past
/// 2^53 that an f64 rounds, and one just above a bf16 tie that an f64 makes a tie
/// (`2^62 + 2^54 + 1`: rounded twice it goes down to 2^62, once it goes up).
fn i64_edges() -> Vec<i64> {
    vec![
        i64::MIN,
        i64::MIN + 1,
        i64::MAX,
        i64::MAX - 1,
        i32::MAX as i64 + 1,
        i32::MIN as i64 - 1,
        (1 << 53) + 1,
        -(1 << 53) - 3,
        (1 << 62) + (1 << 54) + 1,
        -(1 << 62) - (1 << 54) - 1,
        (1 << 60) + (1 << 36) + 1,
        (1 << 40) + 255,
        65519,
        65520,
        -65536,
        4294967551,
    ]
}

/// The exact integer value of an integer element.
fn int_of<S: Element>(v: S) -> i128 {
    match v.to_scalar() {
        Scalar::I32(i) => i.into(),
        Scalar::I64(i) => i.into(),
        Scalar::U8(i) => i.into(),
        other => panic!("{other:?} is no integer"),
    }
}

/// `m` rounded to `bits` significant bits, to nearest, ties to even (exact in i128).
fn round_to_bits(m: i128, bits: u32) -> i128 {
    let a = m.unsigned_abs();
    let width = 128 - a.leading_zeros();
    if width <= bits {
        return m;
    }
    let shift = width - bits;
    let (mut q, rem, half) = (a >> shift, a & ((1 << shift) - 1), 1u128 << (shift - 1));
    if rem > half || (rem == half && q & 1 == 1) {
        q += 1;
    }
    let r = (q << shift) as i128;
    if m < 0 {
        -r
    } else {
        r
    }
}

/// The conversion the spec gives for each pair: integer to integer wraps (as `as`);
/// a float goes through its exact f64 value, which `as` truncates and saturates into an
/// integer (NaN to 0) and which rounds once into a float type; an integer rounds once into
/// a float type, computed here in i128 (an i64's f64 may already be rounded).
fn reference<S: Element, U: Element>(v: S) -> U {
    if !S::DTYPE.is_float() {
        let i = int_of(v);
        return match U::DTYPE {
            DType::I32 => U::from_scalar(Scalar::I32(i as i32)),
            DType::I64 => U::from_scalar(Scalar::I64(i as i64)),
            DType::U8 => U::from_scalar(Scalar::U8(i as u8)),
            // Rust's own conversions of an integer round once.
            DType::F32 => U::from_scalar(Scalar::F32(i as f32)),
            DType::F64 => U::from_scalar(Scalar::F64(i as f64)),
            // Rounded to 8 or 11 bits in i128, then exact in f32 (65520 and above become
            // f16's infinity there, as they should).
            DType::BF16 => U::from_scalar(Scalar::F32(round_to_bits(i, 8) as f32)),
            DType::F16 => U::from_scalar(Scalar::F32(round_to_bits(i, 11) as f32)),
        };
    }
    U::from_f64(v.to_f64())
}

fn sources<S: Element>() -> Vec<S> {
    let mut x = vec![
        0.0,
        -0.0,
        1.0,
        -1.0,
        1.5,
        -1.5,
        2.5,
        -2.5,
        255.9,
        256.0,
        257.0,
        -129.0,
        1.00390625,                           // a tie in bf16: to the even 1.0
        1.01171875,                           // a tie in bf16: to the even 1.015625
        1.0 + 2f64.powi(-8) + 2f64.powi(-40), // above the tie: 1.0078125 once rounded, 1.0 if rounded twice
        16777217.0,
        2147483647.0,
        2147483648.0,
        -2147483649.0,
        65504.0,
        65520.0,
        6e-8,
        1e-40,
        3e38,
        1e300,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    x.extend((0..200).map(|i| (i as f64 - 100.0) * 3.37));
    let mut v: Vec<S> = x.into_iter().map(S::from_f64).collect();
    if S::DTYPE == DType::I32 {
        v.extend([i32::MAX, i32::MIN, 16777217, 16777219, -300].map(|i| S::from_f64(i as f64)));
    }
    if S::DTYPE == DType::I64 {
        v.extend(i64_edges().into_iter().map(|i| S::from_scalar(Scalar::I64(i))));
    }
    if S::DTYPE == DType::U8 {
        v = (0..=255u8).map(|i| S::from_f64(i as f64)).collect();
    }
    v
}

fn check_pair<S: Element, U: Element>() -> locus::Result<()> {
    let src = sources::<S>();
    let want: Vec<U> = src.iter().map(|&v| reference::<S, U>(v)).collect();
    let what = format!("{} -> {}", S::DTYPE, U::DTYPE);
    let g = Tensor::<G, S>::from_slice(&src, [src.len()])?;
    same(&g.to_dtype::<U>()?.to_vec()?, &want, &format!("{what} on cuda:0"));
    let c = Tensor::<Cpu, S>::from_slice(&src, [src.len()])?;
    same(&c.to_dtype::<U>()?.to_vec()?, &want, &format!("{what} on cpu"));
    assert_eq!(g.to_dtype::<U>()?.shape(), g.shape());
    Ok(())
}

macro_rules! each_target {
    ($s:ty) => {
        check_pair::<$s, f32>()?;
        check_pair::<$s, f64>()?;
        check_pair::<$s, i32>()?;
        check_pair::<$s, i64>()?;
        check_pair::<$s, u8>()?;
        check_pair::<$s, bf16>()?;
        check_pair::<$s, f16>()?;
    };
}

#[test]
fn to_dtype_converts_between_every_pair_of_types() -> locus::Result<()> {
    each_target!(f32);
    each_target!(f64);
    each_target!(i32);
    each_target!(i64);
    each_target!(u8);
    each_target!(bf16);
    each_target!(f16);
    Ok(())
}

#[test]
fn i64_extremes_convert_to_every_type_and_back() -> locus::Result<()> {
    fn there_and_back<U: Element>(v: &[i64]) -> locus::Result<()> {
        let there: Vec<U> = v.iter().map(|&i| reference::<i64, U>(i)).collect();
        let back: Vec<i64> = there.iter().map(|&u| reference::<U, i64>(u)).collect();
        for t in [
            Tensor::<G, i64>::from_slice(v, [v.len()])?.into_dyn(),
            Tensor::<Cpu, i64>::from_slice(v, [v.len()])?.into_dyn(),
        ] {
            let u = t.to_dtype::<U>()?;
            same(&u.to_vec()?, &there, &format!("i64 -> {} on {}", U::DTYPE, t.device()));
            assert_eq!(u.to_dtype::<i64>()?.to_vec()?, back, "i64 -> {} -> i64 on {}", U::DTYPE, t.device());
        }
        Ok(())
    }
    let v = [i64::MIN, i64::MAX, 0, -1];
    there_and_back::<f32>(&v)?;
    there_and_back::<f64>(&v)?;
    there_and_back::<i32>(&v)?;
    there_and_back::<i64>(&v)?;
    there_and_back::<u8>(&v)?;
    there_and_back::<bf16>(&v)?;
    there_and_back::<f16>(&v)?;
    // The values, spelled out: saturating back from 2^63, wrapping to the narrow integers.
    let t = Tensor::<G, i64>::from_slice(&v, [4])?;
    assert_eq!(t.to_dtype::<f32>()?.to_dtype::<i64>()?.to_vec()?, vec![i64::MIN, i64::MAX, 0, -1]);
    assert_eq!(t.to_dtype::<i32>()?.to_vec()?, vec![0, -1, 0, -1]);
    assert_eq!(t.to_dtype::<u8>()?.to_vec()?, vec![0, 255, 0, 255]);
    assert_eq!(t.to_dtype::<f16>()?.to_vec()?[..2], [f16::NEG_INFINITY, f16::INFINITY]);
    let big = Tensor::<G, f64>::from_vec(vec![1e300, -1e300, f64::NAN, -0.9, 9.007199254740993e15], [5])?;
    assert_eq!(big.to_dtype::<i64>()?.to_vec()?, vec![i64::MAX, i64::MIN, 0, 0, 9007199254740992]);
    // Just above a bf16 tie: rounded once it goes up.
    let tie = Tensor::<G, i64>::from_vec(vec![(1 << 62) + (1 << 54) + 1], [1])?;
    assert_eq!(tie.to_dtype::<bf16>()?.to_vec()?, vec![bf16::from_f64(((1u64 << 62) + (1 << 55)) as f64)]);
    Ok(())
}

#[test]
fn to_dtype_rounds_once_and_saturates() -> locus::Result<()> {
    let d = Tensor::<G, f64>::from_vec(vec![1.0 + 2f64.powi(-8) + 2f64.powi(-40), 1.0 + 2f64.powi(-8)], [2])?;
    assert_eq!(d.to_dtype::<bf16>()?.to_vec()?, vec![bf16::from_f32(1.0078125), bf16::from_f32(1.0)]);
    let i = Tensor::<G, i32>::from_vec(vec![16777217, -300, 300], [3])?;
    assert_eq!(i.to_dtype::<f32>()?.to_vec()?, vec![16777216.0, -300.0, 300.0]);
    assert_eq!(i.to_dtype::<u8>()?.to_vec()?, vec![1, 212, 44], "integers wrap");
    let f = Tensor::<G>::from_vec(vec![f32::NAN, -1.5, 300.0, 1e10, -1e10], [5])?;
    assert_eq!(f.to_dtype::<u8>()?.to_vec()?, vec![0, 0, 255, 255, 0]);
    assert_eq!(f.to_dtype::<i32>()?.to_vec()?, vec![0, -1, 300, i32::MAX, i32::MIN]);
    assert_eq!(f.to_dtype::<f16>()?.to_vec()?[3], f16::INFINITY, "beyond f16's range");
    let e = Tensor::<G, bf16>::zeros([0, 3])?;
    assert_eq!(e.to_dtype::<f64>()?.shape(), &[0, 3]);
    // The same type: the same values, no kernel.
    let same = f.to_dtype::<f32>()?;
    assert_eq!(same.to_vec()?[1..], f.to_vec()?[1..]);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Any two bf16 bit patterns: GPU and host give the bits f32 arithmetic rounded
    /// once gives.
    #[test]
    fn any_bf16_bits_add_and_divide_like_f32_rounded_once(
        a in proptest::collection::vec(any::<u16>(), 1..300),
        seed in any::<u16>(),
    ) {
        let a: Vec<bf16> = a.into_iter().map(bf16::from_bits).collect();
        let b: Vec<bf16> = a.iter().map(|v| bf16::from_bits(v.to_bits() ^ seed)).collect();
        let add: Vec<bf16> = a.iter().zip(&b).map(|(&x, &y)| bf16::from_f32(x.to_f32() + y.to_f32())).collect();
        let div: Vec<bf16> = a.iter().zip(&b).map(|(&x, &y)| bf16::from_f32(x.to_f32() / y.to_f32())).collect();
        let (ga, gb) = (Tensor::<G, bf16>::from_slice(&a, [a.len()])?, Tensor::<G, bf16>::from_slice(&b, [b.len()])?);
        same(&(&ga + &gb)?.to_vec()?, &add, "add on cuda:0");
        same(&(&ga / &gb)?.to_vec()?, &div, "div on cuda:0");
        let (ca, cb) = (ga.to::<Cpu>()?, gb.to::<Cpu>()?);
        same(&(&ca + &cb)?.to_vec()?, &add, "add on cpu");
        let f: Vec<f16> = a.iter().map(|v| f16::from_bits(v.to_bits())).collect();
        let back: Vec<f32> = f.iter().map(|v| v.to_f32()).collect();
        let gf = Tensor::<G, f16>::from_slice(&f, [f.len()])?;
        same(&gf.to_dtype::<f32>()?.to_vec()?, &back, "f16 -> f32");
        same(&gf.to_dtype::<f32>()?.to_dtype::<f16>()?.to_vec()?, &f, "f16 -> f32 -> f16");
    }
}
