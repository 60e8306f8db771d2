//! Every op against hand-computed values, on cuda:0 of the selected backend and on the
//! host placements, plus the errors bad shapes and arguments give.

use locus::{Cpu, Cuda, Error, Pinned, Tensor};

type G = Cuda<0>;

fn t(data: &[f32], shape: &[usize]) -> Tensor<G> {
    Tensor::from_slice(data, shape).unwrap()
}

#[test]
fn factories_fill_as_asked() -> locus::Result<()> {
    assert_eq!(Tensor::<G>::zeros([2, 2])?.to_vec()?, vec![0.0; 4]);
    assert_eq!(Tensor::<G, f64>::ones([3])?.to_vec()?, vec![1.0; 3]);
    assert_eq!(Tensor::<G, i32>::full([2], -7)?.to_vec()?, vec![-7, -7]);
    assert_eq!(Tensor::<G, u8>::from_vec(vec![1, 2, 255], [3])?.to_vec()?, vec![1, 2, 255]);
    assert_eq!(Tensor::<G, i32>::arange(3, -3, -2)?.to_vec()?, vec![3, 1, -1]);
    assert_eq!(Tensor::<G, f64>::arange(0.0, 0.3, 0.1)?.numel(), 3);
    let z = Tensor::<G>::zeros([2, 0, 3])?;
    assert_eq!((z.numel(), z.shape()), (0, &[2, 0, 3][..]));
    let s = Tensor::<G>::full([], 2.5)?;
    assert_eq!((s.rank(), s.item()?), (0, 2.5));
    Ok(())
}

#[test]
fn factories_reject_bad_input() {
    assert!(matches!(
        Tensor::<G>::from_vec(vec![1.0, 2.0, 3.0], [2, 2]),
        Err(Error::InvalidArgument { op: "from_vec", .. })
    ));
    assert!(matches!(Tensor::<G, i32>::arange(0, 5, 0), Err(Error::InvalidArgument { op: "arange", .. })));
    assert!(matches!(Tensor::<G, i32>::arange(0, 5, -1), Err(Error::InvalidArgument { op: "arange", .. })));
    assert!(matches!(Tensor::<G>::arange(0.0, f32::INFINITY, 1.0), Err(Error::InvalidArgument { .. })));
    assert!(Tensor::<G, u8>::zeros([usize::MAX, 4]).is_err());
}

#[test]
fn rand_is_seeded_uniform_and_device_independent() -> locus::Result<()> {
    let a = Tensor::<G>::rand([1000], 3)?.to_vec()?;
    assert_eq!(a, Tensor::<G>::rand([1000], 3)?.to_vec()?);
    assert_eq!(a, Tensor::<Cpu>::rand([1000], 3)?.to_vec()?);
    assert_ne!(a, Tensor::<G>::rand([1000], 4)?.to_vec()?);
    assert!(a.iter().all(|v| (0.0..1.0).contains(v)));
    let mean = a.iter().sum::<f32>() / 1000.0;
    assert!((mean - 0.5).abs() < 0.05, "mean {mean}");
    let d = Tensor::<G, f64>::rand([10], 3)?.to_vec()?;
    assert!(d.iter().zip(&a).all(|(x, y)| (*x as f32 - y).abs() < 1e-6));
    Ok(())
}

#[test]
fn arithmetic_tensor_with_tensor() -> locus::Result<()> {
    let a = t(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let b = t(&[10.0, 20.0, 30.0, 40.0], &[2, 2]);
    assert_eq!((&a + &b)?.to_vec()?, vec![11.0, 22.0, 33.0, 44.0]);
    assert_eq!((&b - &a)?.to_vec()?, vec![9.0, 18.0, 27.0, 36.0]);
    assert_eq!((&a * &b)?.to_vec()?, vec![10.0, 40.0, 90.0, 160.0]);
    assert_eq!((&b / &a)?.to_vec()?, vec![10.0; 4]);
    // owned and mixed forms
    assert_eq!((a.clone() + b.clone())?.to_vec()?, vec![11.0, 22.0, 33.0, 44.0]);
    assert_eq!((a.clone() - &b)?.to_vec()?, vec![-9.0, -18.0, -27.0, -36.0]);
    assert_eq!((&a * b.clone())?.to_vec()?, vec![10.0, 40.0, 90.0, 160.0]);
    assert_eq!((-&a)?.to_vec()?, vec![-1.0, -2.0, -3.0, -4.0]);
    assert_eq!((-a)?.to_vec()?, vec![-1.0, -2.0, -3.0, -4.0]);
    Ok(())
}

#[test]
fn arithmetic_tensor_with_scalar() -> locus::Result<()> {
    let a = t(&[1.0, 2.0, 4.0], &[3]);
    assert_eq!((&a + 1.0)?.to_vec()?, vec![2.0, 3.0, 5.0]);
    assert_eq!((&a - 1.0)?.to_vec()?, vec![0.0, 1.0, 3.0]);
    assert_eq!((&a * 0.5)?.to_vec()?, vec![0.5, 1.0, 2.0]);
    assert_eq!((a / 4.0)?.to_vec()?, vec![0.25, 0.5, 1.0]);
    let i = Tensor::<G, i32>::from_vec(vec![7, -7], [2])?;
    assert_eq!((&i / 2)?.to_vec()?, vec![3, -3]);
    let u = Tensor::<G, u8>::from_vec(vec![250, 3], [2])?;
    assert_eq!((&u + 10)?.to_vec()?, vec![4, 13], "u8 wraps");
    assert_eq!((-u)?.to_vec()?, vec![6, 253]);
    Ok(())
}

#[test]
fn broadcasting_rows_columns_and_scalars() -> locus::Result<()> {
    let m = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let row = t(&[10.0, 20.0, 30.0], &[3]);
    let col = t(&[100.0, 200.0], &[2, 1]);
    assert_eq!((&m + &row)?.to_vec()?, vec![11.0, 22.0, 33.0, 14.0, 25.0, 36.0]);
    assert_eq!((&m + &col)?.to_vec()?, vec![101.0, 102.0, 103.0, 204.0, 205.0, 206.0]);
    let outer = (&col * &row)?;
    assert_eq!(outer.shape(), &[2, 3]);
    assert_eq!(outer.to_vec()?, vec![1000.0, 2000.0, 3000.0, 2000.0, 4000.0, 6000.0]);
    let s = Tensor::<G>::full([], 2.0)?;
    assert_eq!((&s - &row)?.to_vec()?, vec![-8.0, -18.0, -28.0]);
    assert_eq!((&row / &s)?.to_vec()?, vec![5.0, 10.0, 15.0]);
    Ok(())
}

#[test]
fn mismatched_shapes_are_errors_not_panics() {
    let a = t(&[1.0; 6], &[2, 3]);
    let b = t(&[1.0; 4], &[4]);
    let err = (&a + &b).unwrap_err();
    assert_eq!(err, Error::ShapeMismatch { op: "add", lhs: vec![2, 3], rhs: vec![4] });
    assert!(err.to_string().contains("[2, 3]"));
    assert!(matches!(&a * &b, Err(Error::ShapeMismatch { op: "mul", .. })));
    assert!(matches!(a.matmul(&a), Err(Error::ShapeMismatch { op: "matmul", .. })));
    assert!(matches!(a.matmul(&b), Err(Error::InvalidArgument { op: "matmul", .. })));
    assert!(matches!(a.cat(&t(&[1.0; 4], &[2, 2])), Err(Error::ShapeMismatch { op: "cat", .. })));
    assert!(matches!(b.t(), Err(Error::InvalidArgument { op: "t", .. })));
    assert!(matches!(b.transpose(0, 1), Err(Error::InvalidArgument { op: "transpose", .. })));
    let err = a.reshape([5]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "reshape", .. }));
    // The message gives both element counts, not only the shapes.
    let msg = err.to_string();
    assert!(msg.contains("[5] has 5 elements") && msg.contains("[2, 3] has 6"), "{msg}");
    let err = Tensor::<Cpu>::from_vec(vec![1.0; 3], [2]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "from_vec", .. }), "errors name the fn called: {err}");
}

#[test]
fn integer_division_by_zero_is_an_error() -> locus::Result<()> {
    let a = Tensor::<G, i32>::from_vec(vec![1, 2], [2])?;
    let z = Tensor::<G, i32>::from_vec(vec![1, 0], [2])?;
    assert!(matches!(&a / &z, Err(Error::InvalidArgument { op: "div", .. })));
    assert!(matches!(&a / 0, Err(Error::InvalidArgument { op: "div", .. })));
    let f = (t(&[1.0, -1.0], &[2]) / 0.0)?.to_vec()?;
    assert_eq!(f, vec![f32::INFINITY, f32::NEG_INFINITY], "floats follow IEEE");
    Ok(())
}

#[test]
fn activations_and_elementwise_math() -> locus::Result<()> {
    let a = t(&[-2.0, 0.0, 4.0], &[3]);
    assert_eq!(a.relu()?.to_vec()?, vec![0.0, 0.0, 4.0]);
    assert_eq!(t(&[0.0, 4.0, 9.0], &[3]).sqrt()?.to_vec()?, vec![0.0, 2.0, 3.0]);
    let e = t(&[0.0, 1.0], &[2]).exp()?.to_vec()?;
    assert!((e[0] - 1.0).abs() < 1e-6 && (e[1] - std::f32::consts::E).abs() < 1e-5);
    assert!(t(&[-1.0], &[1]).sqrt()?.item()?.is_nan());
    assert_eq!(Tensor::<G, i32>::from_vec(vec![-3, 3], [2])?.relu()?.to_vec()?, vec![0, 3]);
    Ok(())
}

#[test]
fn reductions() -> locus::Result<()> {
    let m = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    assert_eq!(m.sum()?.item()?, 21.0);
    assert_eq!(m.sum()?.shape(), &[] as &[usize]);
    assert_eq!(m.mean()?.item()?, 3.5);
    assert_eq!(m.max()?.item()?, 6.0);
    assert_eq!(m.sum_dim(0, false)?.to_vec()?, vec![5.0, 7.0, 9.0]);
    assert_eq!(m.sum_dim(1, false)?.to_vec()?, vec![6.0, 15.0]);
    let c = Tensor::<G, i32>::arange(0, 24, 1)?.reshape([2, 3, 4])?;
    let s1 = c.sum_dim(1, false)?;
    assert_eq!(s1.shape(), &[2, 4]);
    assert_eq!(s1.to_vec()?, vec![12, 15, 18, 21, 48, 51, 54, 57]);
    assert_eq!(c.max()?.item()?, 23);
    assert_eq!(Tensor::<G, u8>::full([300], 1)?.sum()?.item()?, 44, "u8 sums wrap");
    assert_eq!(Tensor::<G>::zeros([0])?.sum()?.item()?, 0.0);
    assert!(Tensor::<G>::zeros([0])?.mean()?.item()?.is_nan());
    assert!(matches!(Tensor::<G>::zeros([0])?.max(), Err(Error::InvalidArgument { op: "max", .. })));
    assert!(matches!(m.sum_dim(2, false), Err(Error::InvalidArgument { op: "sum_dim", .. })));
    assert!(matches!(m.sum()?.sum_dim(0, false), Err(Error::InvalidArgument { .. })));
    let big = Tensor::<G, f64>::ones([100_000])?;
    assert_eq!(big.sum()?.item()?, 100_000.0);
    Ok(())
}

#[test]
fn matmul_and_transpose() -> locus::Result<()> {
    let a = t(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]);
    let b = t(&[7.0, 8.0, 9.0, 10.0, 11.0, 12.0], &[3, 2]);
    let c = a.matmul(&b)?;
    assert_eq!(c.shape(), &[2, 2]);
    assert_eq!(c.to_vec()?, vec![58.0, 64.0, 139.0, 154.0]);
    let at = a.t()?;
    assert_eq!(at.shape(), &[3, 2]);
    assert_eq!(at.to_vec()?, vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]);
    assert_eq!(at.t()?.to_vec()?, a.to_vec()?);
    let i = Tensor::<G, i32>::from_vec(vec![1, 2, 3, 4], [2, 2])?;
    assert_eq!(i.matmul(&i)?.to_vec()?, vec![7, 10, 15, 22]);
    let d = Tensor::<G, f64>::from_vec(vec![0.5, 0.25], [1, 2])?;
    assert_eq!(d.matmul(&d.t()?)?.item()?, 0.3125);
    Ok(())
}

#[test]
fn cat_concat_and_chunk() -> locus::Result<()> {
    let a = t(&[1.0, 2.0], &[1, 2]);
    let b = t(&[3.0, 4.0, 5.0, 6.0], &[2, 2]);
    let c = a.cat(&b)?;
    assert_eq!((c.shape(), c.to_vec()?), (&[3, 2][..], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
    let all = Tensor::concat(&[&a, &b, &a])?;
    assert_eq!(all.shape(), &[4, 2]);
    assert!(matches!(Tensor::<G>::concat(&[]), Err(Error::InvalidArgument { op: "cat", .. })));
    let parts = Tensor::<G, i32>::arange(0, 10, 1)?.reshape([5, 2])?.chunk(3)?;
    let shapes: Vec<_> = parts.iter().map(|p| p.shape().to_vec()).collect();
    assert_eq!(shapes, vec![vec![2, 2], vec![2, 2], vec![1, 2]]);
    assert_eq!(parts[2].to_vec()?, vec![8, 9]);
    assert_eq!(Tensor::concat(&parts.iter().collect::<Vec<_>>())?.to_vec()?, (0..10).collect::<Vec<_>>());
    // torch.chunk gives fewer pieces when they would be empty
    assert_eq!(Tensor::<G>::zeros([2])?.chunk(5)?.len(), 2);
    assert!(matches!(c.chunk(0), Err(Error::InvalidArgument { op: "chunk", .. })));
    assert!(Tensor::<G>::full([], 1.0)?.chunk(2).is_err());
    Ok(())
}

#[test]
fn reshape_shares_data_and_checks_counts() -> locus::Result<()> {
    let a = Tensor::<G, i32>::arange(0, 6, 1)?;
    let b = a.reshape([2, 3])?;
    assert_eq!(b.shape(), &[2, 3]);
    assert_eq!(b.to_vec()?, a.to_vec()?);
    assert_eq!(b.reshape([6, 1, 1])?.rank(), 3);
    Ok(())
}

#[test]
fn host_placements_run_every_op_too() -> locus::Result<()> {
    let p = Tensor::<Pinned>::from_vec(vec![1.0, -2.0], [1, 2])?;
    let q = Tensor::<Pinned>::from_vec(vec![3.0, 4.0], [2, 1])?;
    assert_eq!(p.matmul(&q)?.item()?, -5.0);
    assert_eq!((&p * 2.0)?.relu()?.to_vec()?, vec![2.0, 0.0]);
    let c = Tensor::<Cpu, f64>::from_vec(vec![1.0, 4.0], [2])?;
    assert_eq!(c.sqrt()?.sum()?.item()?, 3.0);
    Ok(())
}

#[test]
fn small_mlp_forward_pass() -> locus::Result<()> {
    // relu(x @ w1 + b1) @ w2 + b2, checked by hand.
    let x = t(&[1.0, 2.0], &[1, 2]);
    let w1 = t(&[1.0, -1.0, 0.5, 1.0], &[2, 2]);
    let b1 = t(&[0.0, -0.5], &[2]);
    let w2 = t(&[2.0, 3.0], &[2, 1]);
    let b2 = t(&[1.0], &[1]);
    let h = (x.matmul(&w1)? + &b1)?.relu()?; // [2, 1] + [0, -0.5] -> [2, 0.5]
    let y = (h.matmul(&w2)? + &b2)?; // 4 + 1.5 + 1
    assert_eq!(y.to_vec()?, vec![6.5]);
    Ok(())
}
