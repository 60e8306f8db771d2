//! The selected backend's `cuda:0` against the host (`cpu`) on sizes that reach every
//! kernel path: vector bodies and scalar tails, one-block and two-pass reductions,
//! row and column reductions, ragged transposes, broadcasts and matmuls.
//! On the host backend both sides run the same code; on a GPU this is the check that
//! the kernels agree with the reference.

use locus::{Cpu, Cuda, Element, Tensor};

type G = Cuda<0>;

fn both<T: Element>(data: &[T], shape: &[usize]) -> (Tensor<G, T>, Tensor<Cpu, T>) {
    (Tensor::from_slice(data, shape).unwrap(), Tensor::from_slice(data, shape).unwrap())
}

fn close(a: &[f32], b: &[f32], tol: f32) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        let ok = (x.is_nan() && y.is_nan()) || (x - y).abs() <= tol * (1.0 + y.abs());
        assert!(ok, "element {i}: {x} vs {y}");
    }
}

fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
    // Values in [-2, 2), from the host's seeded generator.
    Tensor::<Cpu>::rand([n], seed).unwrap().to_vec().unwrap().into_iter().map(|v| v * 4.0 - 2.0).collect()
}

#[test]
fn elementwise_ops_match_the_host_at_ragged_sizes() -> locus::Result<()> {
    for n in [1usize, 3, 4, 5, 17, 1023, 4099, 100_003] {
        let (ga, ca) = both(&rand_vec(n, n as u64), &[n]);
        let (gb, cb) = both(&rand_vec(n, n as u64 + 1), &[n]);
        assert_eq!((&ga + &gb)?.to_vec()?, (&ca + &cb)?.to_vec()?, "add {n}");
        assert_eq!((&ga - &gb)?.to_vec()?, (&ca - &cb)?.to_vec()?, "sub {n}");
        assert_eq!((&ga * &gb)?.to_vec()?, (&ca * &cb)?.to_vec()?, "mul {n}");
        assert_eq!((&ga / &gb)?.to_vec()?, (&ca / &cb)?.to_vec()?, "div {n}");
        assert_eq!((&ga * 3.0)?.to_vec()?, (&ca * 3.0)?.to_vec()?, "mul scalar {n}");
        assert_eq!(ga.relu()?.to_vec()?, ca.relu()?.to_vec()?, "relu {n}");
        assert_eq!((-&ga)?.to_vec()?, (-&ca)?.to_vec()?, "neg {n}");
        assert_eq!(ga.sqrt()?.to_vec()?.len(), n);
        close(&ga.sqrt()?.to_vec()?, &ca.sqrt()?.to_vec()?, 0.0);
        close(&ga.exp()?.to_vec()?, &ca.exp()?.to_vec()?, 1e-6);
    }
    Ok(())
}

#[test]
fn integer_ops_match_the_host_exactly() -> locus::Result<()> {
    for n in [7usize, 64, 1001, 65_537] {
        let a: Vec<i32> = (0..n as i32).map(|i| i.wrapping_mul(2_654_435_761u32 as i32)).collect();
        let b: Vec<i32> = (0..n as i32).map(|i| (i % 13) - 6).map(|v| if v == 0 { 7 } else { v }).collect();
        let (ga, ca) = both(&a, &[n]);
        let (gb, cb) = both(&b, &[n]);
        for (g, c) in [((&ga + &gb)?, (&ca + &cb)?), ((&ga * &gb)?, (&ca * &cb)?), ((&ga / &gb)?, (&ca / &cb)?)] {
            assert_eq!(g.to_vec()?, c.to_vec()?);
        }
        assert_eq!(ga.sum()?.item()?, ca.sum()?.item()?, "i32 sum wraps alike, n = {n}");
        assert_eq!(ga.max()?.item()?, ca.max()?.item()?);
        let u: Vec<u8> = (0..n).map(|i| (i * 37 % 256) as u8).collect();
        let (gu, cu) = both(&u, &[n]);
        assert_eq!((&gu + &gu)?.to_vec()?, (&cu + &cu)?.to_vec()?);
        assert_eq!(gu.sum()?.item()?, cu.sum()?.item()?);
        assert_eq!(gu.max()?.item()?, cu.max()?.item()?);
        assert_eq!(gu.relu()?.to_vec()?, u);
    }
    let min = Tensor::<G, i32>::full([3], i32::MIN)?;
    assert_eq!((&min / -1)?.to_vec()?, vec![i32::MIN; 3], "i32::MIN / -1 wraps");
    let z = Tensor::<G, i32>::from_vec(vec![4, 0, 1], [3])?;
    assert!((&min / &z).is_err(), "a zero divisor anywhere is an error");
    Ok(())
}

#[test]
fn reductions_match_the_host_one_block_and_two_pass() -> locus::Result<()> {
    for n in [1usize, 31, 1024, 65_536, 65_537, 1_000_003] {
        let (g, c) = both(&rand_vec(n, 7 + n as u64), &[n]);
        close(&[g.sum()?.item()?], &[c.sum()?.item()?], 1e-6);
        close(&[g.mean()?.item()?], &[c.mean()?.item()?], 1e-6);
        assert_eq!(g.max()?.item()?, c.max()?.item()?, "max of {n}");
    }
    let mut with_nan = rand_vec(100_000, 1);
    with_nan[77_777] = f32::NAN;
    assert!(Tensor::<G>::from_vec(with_nan, [100_000])?.max()?.item()?.is_nan(), "NaN wins in max");
    for shape in [[3usize, 5, 7], [1, 1000, 1], [300, 2, 1], [2, 3000, 4], [1000, 3, 1]] {
        let n = shape.iter().product();
        let (g, c) = both(&rand_vec(n, 99), &shape);
        for dim in 0..3 {
            let (gs, cs) = (g.sum_dim(dim, false)?, c.sum_dim(dim, false)?);
            assert_eq!(gs.shape(), cs.shape());
            close(&gs.to_vec()?, &cs.to_vec()?, 1e-5);
        }
    }
    let (g, c) = both(&(0..6000).map(|i: i32| (i % 251) - 125).collect::<Vec<_>>(), &[60, 100]);
    assert_eq!(g.sum_dim(1, false)?.to_vec()?, c.sum_dim(1, false)?.to_vec()?);
    assert_eq!(g.sum_dim(0, false)?.to_vec()?, c.sum_dim(0, false)?.to_vec()?);
    Ok(())
}

#[test]
fn broadcasts_match_the_host() -> locus::Result<()> {
    let (m, mc) = both(&rand_vec(4 * 33 * 5, 3), &[4, 33, 5]);
    for other in [vec![5usize], vec![33, 1], vec![4, 1, 5], vec![1, 33, 5], vec![], vec![1]] {
        let n = other.iter().product();
        let (o, oc) = both(&rand_vec(n, 5), &other);
        assert_eq!((&m + &o)?.to_vec()?, (&mc + &oc)?.to_vec()?, "with {other:?}");
        assert_eq!((&o - &m)?.to_vec()?, (&oc - &mc)?.to_vec()?, "from {other:?}");
    }
    Ok(())
}

#[test]
fn matrix_ops_match_the_host() -> locus::Result<()> {
    for (m, k, n) in [(1, 1, 1), (3, 5, 7), (33, 17, 65), (128, 64, 96), (5, 0, 3)] {
        let (a, ac) = both(&rand_vec(m * k, 11), &[m, k]);
        let (b, bc) = both(&rand_vec(k * n, 12), &[k, n]);
        close(&a.matmul(&b)?.to_vec()?, &ac.matmul(&bc)?.to_vec()?, 1e-4);
        assert_eq!(a.t()?.to_vec()?, ac.t()?.to_vec()?);
        let (ad, acd) = (a.to::<Cpu>()?, ac.clone());
        assert_eq!(ad.to_vec()?, acd.to_vec()?);
    }
    let ai: Vec<i32> = (0..35).map(|i| i % 7 - 3).collect();
    let bi: Vec<i32> = (0..63).map(|i| i % 5 - 2).collect();
    let (a, ac) = both(&ai, &[5, 7]);
    let (b, bc) = both(&bi, &[7, 9]);
    assert_eq!(a.matmul(&b)?.to_vec()?, ac.matmul(&bc)?.to_vec()?);
    let (d, dc) = both(&(0..12).map(|i| i as f64 * 0.5).collect::<Vec<_>>(), &[3, 4]);
    assert_eq!(d.matmul(&d.t()?)?.to_vec()?, dc.matmul(&dc.t()?)?.to_vec()?);
    let (u, uc) = both(&(0..70u8).collect::<Vec<_>>(), &[7, 10]);
    assert_eq!(u.t()?.to_vec()?, uc.t()?.to_vec()?);
    Ok(())
}

#[test]
fn factories_match_the_host() -> locus::Result<()> {
    assert_eq!(Tensor::<G>::rand([10_001], 5)?.to_vec()?, Tensor::<Cpu>::rand([10_001], 5)?.to_vec()?);
    assert_eq!(Tensor::<G, f64>::rand([999], 5)?.to_vec()?, Tensor::<Cpu, f64>::rand([999], 5)?.to_vec()?);
    assert_eq!(
        Tensor::<G, f64>::arange(-1.0, 1.0, 0.001)?.to_vec()?,
        Tensor::<Cpu, f64>::arange(-1.0, 1.0, 0.001)?.to_vec()?
    );
    assert_eq!(Tensor::<G, u8>::full([33], 200)?.to_vec()?, vec![200; 33]);
    let parts = Tensor::<G, i32>::arange(0, 1000, 1)?.reshape([100, 10])?.chunk(7)?;
    let back = Tensor::concat(&parts.iter().collect::<Vec<_>>())?;
    assert_eq!(back.to_vec()?, (0..1000).collect::<Vec<_>>());
    Ok(())
}
