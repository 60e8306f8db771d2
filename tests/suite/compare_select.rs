//! Comparisons (`eq`, `ne`, `lt`, `le`, `gt`, `ge` and their `_scalar` forms) and
//! `Tensor::where_` on cuda:0 of the selected backend and on `Cpu`, against plain loops
//! over `Vec`s, for every element type (f32, f64, i32, i64, u8, bf16, f16): random shapes of
//! rank 1 to 4 under NumPy broadcasting, values drawn from a few so that ties are common,
//! with NaN, ±0.0 and the infinities among the floats. Results are exact (`u8` masks, selected elements compared
//! by their bits). Then the errors: shapes that do not broadcast, `Dyn` operands on two
//! devices.

use locus::{bf16, f16, Cpu, Cuda, Device, DeviceId, Dyn, Element, Error, Tensor};
use proptest::prelude::*;

type G = Cuda<0>;

#[derive(Clone, Copy, Debug)]
enum Cmp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

const ALL: [Cmp; 6] = [Cmp::Eq, Cmp::Ne, Cmp::Lt, Cmp::Le, Cmp::Gt, Cmp::Ge];

/// The comparison as Rust's operators define it (IEEE for floats).
fn holds<T: PartialOrd>(c: Cmp, a: T, b: T) -> bool {
    match c {
        Cmp::Eq => a == b,
        Cmp::Ne => a != b,
        Cmp::Lt => a < b,
        Cmp::Le => a <= b,
        Cmp::Gt => a > b,
        Cmp::Ge => a >= b,
    }
}

fn tensor_cmp<D: Device, T: Element>(c: Cmp, a: &Tensor<D, T>, b: &Tensor<D, T>) -> locus::Result<Tensor<D, u8>> {
    match c {
        Cmp::Eq => a.eq(b),
        Cmp::Ne => a.ne(b),
        Cmp::Lt => a.lt(b),
        Cmp::Le => a.le(b),
        Cmp::Gt => a.gt(b),
        Cmp::Ge => a.ge(b),
    }
}

fn scalar_cmp<D: Device, T: Element>(c: Cmp, a: &Tensor<D, T>, v: T) -> locus::Result<Tensor<D, u8>> {
    match c {
        Cmp::Eq => a.eq_scalar(v),
        Cmp::Ne => a.ne_scalar(v),
        Cmp::Lt => a.lt_scalar(v),
        Cmp::Le => a.le_scalar(v),
        Cmp::Gt => a.gt_scalar(v),
        Cmp::Ge => a.ge_scalar(v),
    }
}

/// The NumPy broadcast of `shapes`, by the rule: right-aligned, each dim equal or 1.
fn ref_broadcast(shapes: &[&[usize]]) -> Option<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max()?;
    let mut out = vec![1; rank];
    for s in shapes {
        for (d, &n) in s.iter().enumerate() {
            let o = &mut out[rank - s.len() + d];
            if *o == 1 {
                *o = n;
            } else if n != 1 && n != *o {
                return None;
            }
        }
    }
    Some(out)
}

fn unravel(mut i: usize, shape: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}

/// The element of an operand of `shape` that output index `idx` reads (a dim of 1 is
/// read at 0, missing leading dims are ignored).
fn read_at(idx: &[usize], shape: &[usize]) -> usize {
    let skip = idx.len() - shape.len();
    shape.iter().enumerate().fold(0, |at, (d, &n)| at * n + if n == 1 { 0 } else { idx[skip + d] })
}

/// An output shape of rank 1 to 4 (dims 0 to 4) and `k` operand shapes that broadcast
/// to it or to a shape it covers: each drops some leading dims and sets some to 1.
fn shapes(k: usize) -> impl Strategy<Value = Vec<Vec<usize>>> {
    proptest::collection::vec(prop_oneof![1 => Just(0usize), 6 => 1usize..=4], 1..=4).prop_flat_map(move |out| {
        let rank = out.len();
        let one = (0..=rank, proptest::collection::vec(proptest::bool::weighted(0.3), rank)).prop_map({
            let out = out.clone();
            move |(drop, ones)| out[drop..].iter().zip(&ones[drop..]).map(|(&d, &o)| if o { 1 } else { d }).collect()
        });
        proptest::collection::vec(one, k)
    })
}

/// `n` values from `pick`, one per element.
fn values<T: std::fmt::Debug>(pick: impl Strategy<Value = T> + Clone, n: usize) -> impl Strategy<Value = Vec<T>> {
    proptest::collection::vec(pick, n)
}

fn f64s() -> impl Strategy<Value = f64> + Clone {
    prop_oneof![
        6 => (-3i8..=3).prop_map(f64::from),
        1 => prop_oneof![Just(f64::NAN), Just(-0.0), Just(f64::INFINITY), Just(f64::NEG_INFINITY), Just(0.5)],
    ]
}

fn i32s() -> impl Strategy<Value = i32> + Clone {
    prop_oneof![6 => -3i32..=3, 1 => prop_oneof![Just(i32::MIN), Just(i32::MAX)]]
}

/// Small values and the extremes, and values that differ only above bit 31 (an i64
/// compared through 32 bits anywhere would tie them).
fn i64s() -> impl Strategy<Value = i64> + Clone {
    prop_oneof![6 => -3i64..=3, 1 => prop_oneof![Just(i64::MIN), Just(i64::MAX), Just(1 << 40), Just((1 << 40) + 1)]]
}

fn u8s() -> impl Strategy<Value = u8> + Clone {
    prop_oneof![6 => 0u8..=4, 1 => Just(255u8)]
}

/// Two operands (shapes and values) for a comparison.
fn operands<T: std::fmt::Debug + Clone + 'static>(
    pick: impl Strategy<Value = T> + Clone + 'static,
) -> impl Strategy<Value = (Vec<usize>, Vec<T>, Vec<usize>, Vec<T>)> {
    shapes(2).prop_flat_map(move |s| {
        let (sa, sb) = (s[0].clone(), s[1].clone());
        let (na, nb) = (sa.iter().product(), sb.iter().product());
        (Just(sa), values(pick.clone(), na), Just(sb), values(pick.clone(), nb))
    })
}

/// Every comparison of `a` and `b` (and of `a` and the scalar `b[0]`, when there is one)
/// on cuda:0 and on `Cpu` against the loop.
fn check_compare<T: Element>(sa: &[usize], a: &[T], sb: &[usize], b: &[T]) -> Result<(), TestCaseError> {
    let out = ref_broadcast(&[sa, sb]).expect("the strategy makes broadcastable shapes");
    let n: usize = out.iter().product();
    let (ga, gb) = (Tensor::<G, T>::from_slice(a, sa).unwrap(), Tensor::<G, T>::from_slice(b, sb).unwrap());
    let (ca, cb) = (Tensor::<Cpu, T>::from_slice(a, sa).unwrap(), Tensor::<Cpu, T>::from_slice(b, sb).unwrap());
    for c in ALL {
        let want: Vec<u8> = (0..n)
            .map(|i| {
                let idx = unravel(i, &out);
                u8::from(holds(c, a[read_at(&idx, sa)], b[read_at(&idx, sb)]))
            })
            .collect();
        let g = tensor_cmp(c, &ga, &gb).unwrap();
        let h = tensor_cmp(c, &ca, &cb).unwrap();
        prop_assert_eq!(g.shape(), &out[..], "{:?} {:?} {:?}", c, sa, sb);
        prop_assert_eq!(h.shape(), &out[..]);
        prop_assert_eq!(&g.to_vec().unwrap(), &want, "{:?} on cuda:0 of {:?} {:?} and {:?} {:?}", c, sa, a, sb, b);
        prop_assert_eq!(&h.to_vec().unwrap(), &want, "{:?} on cpu", c);
        if let Some(&v) = b.first() {
            let want: Vec<u8> = a.iter().map(|&x| u8::from(holds(c, x, v))).collect();
            let g = scalar_cmp(c, &ga, v).unwrap();
            prop_assert_eq!(g.shape(), sa);
            prop_assert_eq!(&g.to_vec().unwrap(), &want, "{:?}_scalar({:?}) on cuda:0 of {:?}", c, v, a);
            prop_assert_eq!(&scalar_cmp(c, &ca, v).unwrap().to_vec().unwrap(), &want, "{:?}_scalar on cpu", c);
        }
    }
    Ok(())
}

/// Bits of each element, so that NaNs compare equal and -0.0 differs from 0.0.
fn bits<T: Element>(v: &[T]) -> Vec<u64> {
    v.iter().map(|x| x.to_f64().to_bits()).collect()
}

/// `where_(m, a, b)` on cuda:0 and on `Cpu` against the loop.
fn check_where<T: Element>(s: &[Vec<usize>], m: &[u8], a: &[T], b: &[T]) -> Result<(), TestCaseError> {
    let out = ref_broadcast(&[&s[0], &s[1], &s[2]]).expect("broadcastable");
    let want: Vec<T> = (0..out.iter().product())
        .map(|i| {
            let idx = unravel(i, &out);
            if m[read_at(&idx, &s[0])] != 0 {
                a[read_at(&idx, &s[1])]
            } else {
                b[read_at(&idx, &s[2])]
            }
        })
        .collect();
    let g = Tensor::where_(
        &Tensor::<G, u8>::from_slice(m, &s[0]).unwrap(),
        &Tensor::<G, T>::from_slice(a, &s[1]).unwrap(),
        &Tensor::<G, T>::from_slice(b, &s[2]).unwrap(),
    )
    .unwrap();
    let c = Tensor::where_(
        &Tensor::<Cpu, u8>::from_slice(m, &s[0]).unwrap(),
        &Tensor::<Cpu, T>::from_slice(a, &s[1]).unwrap(),
        &Tensor::<Cpu, T>::from_slice(b, &s[2]).unwrap(),
    )
    .unwrap();
    prop_assert_eq!(g.shape(), &out[..], "{:?}", s);
    prop_assert_eq!(c.shape(), &out[..]);
    prop_assert_eq!(bits(&g.to_vec().unwrap()), bits(&want), "where on cuda:0, shapes {:?}, mask {:?}", s, m);
    prop_assert_eq!(bits(&c.to_vec().unwrap()), bits(&want), "where on cpu");
    Ok(())
}

/// A mask, `a` and `b` of broadcastable shapes; mask values 0 to 3 and 255 (any non-zero
/// value selects `a`).
fn where_operands<T: std::fmt::Debug + Clone + 'static>(
    pick: impl Strategy<Value = T> + Clone + 'static,
) -> impl Strategy<Value = (Vec<Vec<usize>>, Vec<u8>, Vec<T>, Vec<T>)> {
    shapes(3).prop_flat_map(move |s| {
        let n = |i: usize| s[i].iter().product::<usize>();
        let mask = proptest::collection::vec(prop_oneof![3 => 0u8..=3, 1 => Just(255u8)], n(0));
        (Just(s.clone()), mask, values(pick.clone(), n(1)), values(pick.clone(), n(2)))
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn comparisons_of_f32((sa, a, sb, b) in operands(f64s().prop_map(|v| v as f32))) {
        check_compare::<f32>(&sa, &a, &sb, &b)?;
    }

    #[test]
    fn comparisons_of_f64((sa, a, sb, b) in operands(f64s())) {
        check_compare::<f64>(&sa, &a, &sb, &b)?;
    }

    #[test]
    fn comparisons_of_i32((sa, a, sb, b) in operands(i32s())) {
        check_compare::<i32>(&sa, &a, &sb, &b)?;
    }

    #[test]
    fn comparisons_of_i64((sa, a, sb, b) in operands(i64s())) {
        check_compare::<i64>(&sa, &a, &sb, &b)?;
    }

    #[test]
    fn comparisons_of_u8((sa, a, sb, b) in operands(u8s())) {
        check_compare::<u8>(&sa, &a, &sb, &b)?;
    }

    #[test]
    fn comparisons_of_bf16((sa, a, sb, b) in operands(f64s().prop_map(bf16::from_f64))) {
        check_compare::<bf16>(&sa, &a, &sb, &b)?;
    }

    #[test]
    fn comparisons_of_f16((sa, a, sb, b) in operands(f64s().prop_map(f16::from_f64))) {
        check_compare::<f16>(&sa, &a, &sb, &b)?;
    }

    #[test]
    fn where_of_bf16((s, m, a, b) in where_operands(f64s().prop_map(bf16::from_f64))) {
        check_where::<bf16>(&s, &m, &a, &b)?;
    }

    #[test]
    fn where_of_f16((s, m, a, b) in where_operands(f64s().prop_map(f16::from_f64))) {
        check_where::<f16>(&s, &m, &a, &b)?;
    }

    #[test]
    fn where_of_f32((s, m, a, b) in where_operands(f64s().prop_map(|v| v as f32))) {
        check_where::<f32>(&s, &m, &a, &b)?;
    }

    #[test]
    fn where_of_f64((s, m, a, b) in where_operands(f64s())) {
        check_where::<f64>(&s, &m, &a, &b)?;
    }

    #[test]
    fn where_of_i32((s, m, a, b) in where_operands(i32s())) {
        check_where::<i32>(&s, &m, &a, &b)?;
    }

    #[test]
    fn where_of_i64((s, m, a, b) in where_operands(i64s())) {
        check_where::<i64>(&s, &m, &a, &b)?;
    }

    #[test]
    fn where_of_u8((s, m, a, b) in where_operands(u8s())) {
        check_where::<u8>(&s, &m, &a, &b)?;
    }
}

/// Long operands, so that the GPU kernels' vector loops and tails both run (lengths no
/// multiple of any vector width), same-shape and broadcast.
#[test]
fn long_comparisons_and_selects() {
    let n = 4099;
    let a: Vec<f32> = (0..n).map(|i| ((i * 37) % 11) as f32 - 5.0).collect();
    let b: Vec<f32> = (0..n).map(|i| ((i * 53) % 7) as f32 - 3.0).collect();
    check_compare::<f32>(&[n], &a, &[n], &b).unwrap();
    check_compare::<f32>(&[n], &a, &[1], &b[..1]).unwrap();
    let u: Vec<u8> = (0..n).map(|i| (i % 5) as u8).collect();
    check_compare::<u8>(&[n], &u, &[n], &u.iter().rev().copied().collect::<Vec<_>>()).unwrap();
    let h: Vec<bf16> = a.iter().map(|&x| bf16::from_f32(x)).collect();
    check_compare::<bf16>(&[n], &h, &[1], &[bf16::from_f32(0.0)]).unwrap();
    check_where::<bf16>(&[vec![n], vec![n], vec![n]], &(0..n).map(|i| (i % 2) as u8).collect::<Vec<_>>(), &h, &h)
        .unwrap();
    let d: Vec<f64> = a.iter().map(|&x| f64::from(x)).collect();
    check_compare::<f64>(&[1, n], &d, &[3, 1], &[0.0, 1.0, f64::NAN]).unwrap();
    let m: Vec<u8> = (0..n).map(|i| u8::from(i % 3 == 0)).collect();
    check_where::<f32>(&[vec![n], vec![n], vec![n]], &m, &a, &b).unwrap();
    check_where::<u8>(&[vec![n], vec![n], vec![1]], &m, &u, &[9]).unwrap();
    check_where::<f64>(&[vec![n, 1], vec![1, 3], vec![]], &m, &[1.0, 2.0, 3.0], &[-1.0]).unwrap();
}

#[test]
fn nan_and_signed_zero_compare_as_ieee() -> locus::Result<()> {
    let a = Tensor::<G>::from_vec(vec![f32::NAN, f32::NAN, -0.0, f32::INFINITY], [4])?;
    let b = Tensor::<G>::from_vec(vec![f32::NAN, 1.0, 0.0, f32::INFINITY], [4])?;
    assert_eq!(a.eq(&b)?.to_vec()?, vec![0, 0, 1, 1]);
    assert_eq!(a.ne(&b)?.to_vec()?, vec![1, 1, 0, 0]);
    assert_eq!(a.lt(&b)?.to_vec()?, vec![0, 0, 0, 0]);
    assert_eq!(a.le(&b)?.to_vec()?, vec![0, 0, 1, 1]);
    assert_eq!(a.gt(&b)?.to_vec()?, vec![0, 0, 0, 0]);
    assert_eq!(a.ge(&b)?.to_vec()?, vec![0, 0, 1, 1]);
    assert_eq!(a.eq_scalar(f32::NAN)?.to_vec()?, vec![0; 4]);
    assert_eq!(a.ne_scalar(f32::NAN)?.to_vec()?, vec![1; 4]);
    assert_eq!(a.ge_scalar(0.0)?.to_vec()?, vec![0, 0, 1, 1]);
    let d = Tensor::<Cpu, f64>::from_vec(vec![f64::NAN, -0.0], [2])?;
    assert_eq!(d.le_scalar(0.0)?.to_vec()?, vec![0, 1]);
    Ok(())
}

#[test]
fn where_keeps_the_selected_bits() -> locus::Result<()> {
    let m = Tensor::<G, u8>::from_vec(vec![1, 0, 7, 0], [4])?;
    let a = Tensor::<G>::from_vec(vec![-0.0, 1.0, f32::NAN, 2.0], [4])?;
    let b = Tensor::<G>::from_vec(vec![5.0, -0.0, 6.0, f32::INFINITY], [4])?;
    let w = Tensor::where_(&m, &a, &b)?.to_vec()?;
    assert!(w[0] == 0.0 && w[0].is_sign_negative() && w[1].is_sign_negative() && w[2].is_nan());
    assert_eq!(w[3], f32::INFINITY);
    // A 0-d mask picks one operand whole; empty operands give an empty result.
    let all = Tensor::where_(&Tensor::<G, u8>::full([], 0)?, &a, &b)?;
    assert_eq!(all.to_vec()?, b.to_vec()?);
    let e = Tensor::where_(&Tensor::<G, u8>::zeros([0, 1])?, &a, &b)?;
    assert_eq!(e.shape(), &[0, 4]);
    Ok(())
}

#[test]
fn comparisons_and_where_of_unbroadcastable_shapes_are_errors() -> locus::Result<()> {
    let a = Tensor::<G>::zeros([2, 3])?;
    let b = Tensor::<G>::zeros([4])?;
    for (c, name) in ALL.iter().zip(["eq", "ne", "lt", "le", "gt", "ge"]) {
        let e = tensor_cmp(*c, &a, &b).unwrap_err();
        assert_eq!(e, Error::ShapeMismatch { op: name, lhs: vec![2, 3], rhs: vec![4] });
    }
    let m = Tensor::<G, u8>::ones([3])?;
    let e = Tensor::where_(&m, &a, &b).unwrap_err();
    // The operand that disagrees, and the first one that set the dim it disagrees on.
    assert_eq!(e, Error::ShapeMismatch { op: "where", lhs: vec![3], rhs: vec![4] });
    let short = Tensor::<G, u8>::ones([2])?;
    let e = Tensor::where_(&short, &a, &a).unwrap_err();
    assert_eq!(e, Error::ShapeMismatch { op: "where", lhs: vec![2], rhs: vec![2, 3] });
    assert!(Tensor::where_(&short.reshape([2, 1])?, &a, &b.reshape([1, 4])?).is_err());
    Ok(())
}

#[test]
fn dyn_operands_on_two_devices_are_device_mismatches() -> locus::Result<()> {
    let g = Tensor::<Dyn>::zeros_on(Dyn::new(DeviceId::Cuda(0)), [2])?;
    let c = Tensor::<Dyn>::zeros_on(Dyn::new(DeviceId::Cpu), [2])?;
    for (cmp, name) in ALL.iter().zip(["eq", "ne", "lt", "le", "gt", "ge"]) {
        let e = tensor_cmp(*cmp, &g, &c).unwrap_err();
        assert_eq!(e, Error::DeviceMismatch { op: name, lhs: DeviceId::Cuda(0), rhs: DeviceId::Cpu });
    }
    let m = Tensor::<Dyn, u8>::zeros_on(Dyn::new(DeviceId::Cuda(0)), [2])?;
    let e = Tensor::where_(&m, &g, &c).unwrap_err();
    assert_eq!(e, Error::DeviceMismatch { op: "where", lhs: DeviceId::Cuda(0), rhs: DeviceId::Cpu });
    let e = Tensor::where_(&m, &c, &g).unwrap_err();
    assert_eq!(e, Error::DeviceMismatch { op: "where", lhs: DeviceId::Cuda(0), rhs: DeviceId::Cpu });
    // A static operand with a Dyn one on its device is checked at run time, and passes.
    let s = Tensor::<G>::from_vec(vec![1.0, -1.0], [2])?;
    assert_eq!(s.gt(&g)?.to_vec()?, vec![1, 0]);
    let w = Tensor::where_(&s.gt_scalar(0.0)?, &g, &s)?;
    assert_eq!(w.to_vec()?, vec![0.0, -1.0]);
    let e = s.eq(&c).unwrap_err();
    assert_eq!(e, Error::DeviceMismatch { op: "eq", lhs: DeviceId::Cuda(0), rhs: DeviceId::Cpu });
    Ok(())
}
