//! `transpose(d0, d1)` (issue 20): any two dims of a tensor of any rank swapped into a new
//! contiguous tensor, against a plain-Rust reference on random shapes of rank 1 to 5 and
//! every pair of dims, for every element type, on cuda:0 of the selected backend and on
//! `Cpu` (the host kernels); shapes large enough that the kernels split their work and
//! loop over their grid; `t()`, the 2-d transpose; and the errors of dims out of range.

use locus::{bf16, f16, Cpu, Cuda, Element, Error, Tensor};
use proptest::prelude::*;

type G = Cuda<0>;

/// `x` of `shape` with dims `d0` and `d1` swapped, by the definition: output index `i`
/// read from the input index with those two coordinates exchanged.
fn reference<T: Copy>(x: &[T], shape: &[usize], d0: usize, d1: usize) -> Vec<T> {
    let mut out_shape = shape.to_vec();
    out_shape.swap(d0, d1);
    (0..x.len())
        .map(|i| {
            let mut idx = vec![0; shape.len()];
            let mut rest = i;
            for d in (0..shape.len()).rev() {
                idx[d] = rest % out_shape[d];
                rest /= out_shape[d];
            }
            idx.swap(d0, d1);
            x[idx.iter().zip(shape).fold(0, |a, (&i, &n)| a * n + i)]
        })
        .collect()
}

/// `transpose(d0, d1)` of `x` on cuda:0 and on cpu, checked against the reference.
fn check<T: Element>(x: &[T], shape: &[usize], d0: usize, d1: usize) -> Result<(), TestCaseError> {
    let e = |e: Error| TestCaseError::fail(e.to_string());
    let want = reference(x, shape, d0, d1);
    let mut out_shape = shape.to_vec();
    out_shape.swap(d0, d1);
    let gpu = Tensor::<G, T>::from_slice(x, shape).and_then(|t| t.transpose(d0, d1)).map_err(e)?;
    prop_assert_eq!(gpu.shape(), &out_shape[..]);
    prop_assert_eq!(gpu.to_vec().map_err(e)?, want.clone(), "{:?} ({}, {}) on cuda:0", shape, d0, d1);
    let host = Tensor::<Cpu, T>::from_slice(x, shape).and_then(|t| t.transpose(d0, d1)).map_err(e)?;
    prop_assert_eq!(host.to_vec().map_err(e)?, want, "{:?} ({}, {}) on cpu", shape, d0, d1);
    Ok(())
}

/// Every pair of dims of `shape`, both orders and equal dims included, for every type.
fn check_all_pairs(shape: &[usize], seed: u32) -> Result<(), TestCaseError> {
    let n: usize = shape.iter().product();
    let ints: Vec<i32> = (0..n as u32).map(|i| (i.wrapping_mul(2_654_435_761) ^ seed) as i32).collect();
    let floats: Vec<f32> = ints.iter().map(|&i| i as f32 * 0.5).collect();
    let doubles: Vec<f64> = ints.iter().map(|&i| i as f64 / 3.0).collect();
    let bytes: Vec<u8> = ints.iter().map(|&i| i as u8).collect();
    let brains: Vec<bf16> = ints.iter().map(|&i| bf16::from_f32(i as f32)).collect();
    let halves: Vec<f16> = ints.iter().map(|&i| f16::from_f32((i % 4000) as f32 * 0.25)).collect();
    for d0 in 0..shape.len() {
        for d1 in 0..shape.len() {
            check(&floats, shape, d0, d1)?;
            check(&ints, shape, d0, d1)?;
            check(&doubles, shape, d0, d1)?;
            check(&bytes, shape, d0, d1)?;
            check(&brains, shape, d0, d1)?;
            check(&halves, shape, d0, d1)?;
        }
    }
    Ok(())
}

fn shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(prop_oneof![1 => Just(0usize), 3 => Just(1), 8 => 2usize..7], 1..=5)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn swapping_any_two_dims_matches_the_definition(shape in shape(), seed: u32) {
        check_all_pairs(&shape, seed)?;
    }
}

#[test]
fn large_shapes_split_over_the_workers_and_loop_over_the_grid() {
    // Batched tiles ([B, R, C] -> [B, C, R]), strided runs, strided gathers, a plain copy;
    // each at least twice the host kernels' split threshold (2^15 elements).
    for (shape, d0, d1) in [
        (&[30, 70, 90][..], 1, 2),
        (&[400, 50, 7], 0, 1),
        (&[40, 50, 70], 0, 2),
        (&[4, 9, 40, 60], 1, 3),
        (&[300, 200], 0, 1),
        (&[2, 1, 40_000], 0, 1),
        (&[50_000, 3, 4], 1, 2),
    ] {
        let n: usize = shape.iter().product();
        let x: Vec<i32> = (0..n as i32).collect();
        check(&x, shape, d0, d1).unwrap_or_else(|e| panic!("{shape:?} ({d0}, {d1}): {e}"));
    }
    // More matrices than a grid has blocks along z, and more tiles of rows than along y.
    let x: Vec<u8> = (0..70_000 * 6).map(|i| (i * 7) as u8).collect();
    check(&x, &[70_000, 2, 3], 1, 2).unwrap();
    let x: Vec<bf16> = (0..70_000 * 6).map(|i| bf16::from_f32((i % 251) as f32)).collect();
    check(&x, &[70_000, 3, 2], 0, 2).unwrap();
    let x: Vec<u8> = (0..2_100_000 * 2).map(|i| (i * 13) as u8).collect();
    let t = Tensor::<G, u8>::from_slice(&x, [2_100_000, 2]).unwrap().t().unwrap();
    assert_eq!(t.to_vec().unwrap(), reference(&x, &[2_100_000, 2], 0, 1));
}

#[test]
fn t_is_the_2d_transpose_and_transpose_of_equal_dims_a_copy() -> locus::Result<()> {
    let x = Tensor::<G>::from_vec(vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [2, 3])?;
    assert_eq!(x.t()?.to_vec()?, x.transpose(0, 1)?.to_vec()?);
    assert_eq!(x.t()?.to_vec()?, x.transpose(1, 0)?.to_vec()?);
    assert_eq!(x.t()?.shape(), &[3, 2]);
    let same = x.transpose(1, 1)?;
    assert_eq!((same.shape(), same.to_vec()?), (x.shape(), x.to_vec()?));
    let s = Tensor::<G, i32>::full([], 7)?;
    assert!(matches!(s.t(), Err(Error::InvalidArgument { op: "t", .. })));
    assert!(matches!(Tensor::<G>::zeros([2, 2, 2])?.t(), Err(Error::InvalidArgument { op: "t", .. })));
    Ok(())
}

#[test]
fn a_dim_out_of_range_is_an_error_naming_it() -> locus::Result<()> {
    let x = Tensor::<G>::zeros([2, 3, 4])?;
    for (d0, d1) in [(3, 0), (0, 3), (usize::MAX, 1)] {
        match x.transpose(d0, d1) {
            Err(e @ Error::InvalidArgument { op: "transpose", .. }) => {
                assert!(e.to_string().contains("out of range for a tensor of shape [2, 3, 4]"), "{e}");
            }
            other => panic!("({d0}, {d1}): {other:?}"),
        }
    }
    let s = Tensor::<Cpu>::full([], 1.0)?;
    assert!(matches!(s.transpose(0, 0), Err(Error::InvalidArgument { op: "transpose", .. })));
    Ok(())
}
