//! The `i64` element type (issue 33): factories, arithmetic that wraps, integer division
//! by zero as an error, the unary ops, whole-tensor reductions, layout ops, and `i64`
//! indices and targets, on cuda:0 of the selected backend and on `Cpu`, against plain
//! Rust over `Vec<i64>`. Values past 32 bits are everywhere, so that an i64 computed
//! through 32 bits anywhere (a wrong kernel type, a 4-byte accumulator) shows.
//! Conversions, comparisons, `where_` and dim reductions of i64 are in half.rs,
//! compare_select.rs and dim_reduce.rs with the other types.

use locus::{Cpu, Cuda, Device, Dyn, Tensor};

type G = Cuda<0>;

/// Values of every size: small, past 32 bits, the extremes.
fn values() -> Vec<i64> {
    let mut v = vec![0, 1, -1, 7, -7, i64::MAX, i64::MIN, i64::MIN + 1, 1 << 40, -(1 << 33) - 5, 3_000_000_007];
    v.extend((0..40).map(|i| (i - 20) * 123_456_789_011));
    v
}

/// Each placement the tests run on: cuda:0 of the selected backend, and the host.
fn on_both(f: impl Fn(Dyn) -> locus::Result<()>) -> locus::Result<()> {
    f(Dyn::new(G::default().id()))?;
    f(Dyn::new(Cpu.id()))
}

fn t(on: Dyn, v: &[i64], shape: impl AsRef<[usize]>) -> locus::Result<Tensor<Dyn, i64>> {
    Tensor::from_slice_on(on, v, shape)
}

#[test]
fn factories_make_i64_values_past_32_bits() -> locus::Result<()> {
    on_both(|on| {
        assert_eq!(Tensor::<Dyn, i64>::zeros_on(on, [3])?.to_vec()?, vec![0; 3]);
        assert_eq!(Tensor::<Dyn, i64>::ones_on(on, [2, 2])?.to_vec()?, vec![1; 4]);
        assert_eq!(Tensor::<Dyn, i64>::full_on(on, [3], i64::MIN)?.to_vec()?, vec![i64::MIN; 3]);
        let v = values();
        assert_eq!(Tensor::<Dyn, i64>::from_vec_on(on, v.clone(), [v.len()])?.to_vec()?, v);
        assert_eq!(t(on, &[1 << 50], [])?.item()?, 1 << 50);
        let start = -(1i64 << 52);
        let step = 3i64 << 48;
        let want: Vec<i64> = (0..).map(|i| start + i * step).take_while(|&x| x < 1 << 52).collect();
        assert_eq!(Tensor::<Dyn, i64>::arange_on(on, start, 1 << 52, step)?.to_vec()?, want);
        assert_eq!(Tensor::<Dyn, i64>::arange_on(on, 5, -5, -3)?.to_vec()?, vec![5, 2, -1, -4]);
        // Past 2^52 the f64 the values are computed in would round them: refused.
        let e = Tensor::<Dyn, i64>::arange_on(on, 0, (1 << 52) + 1, 1).unwrap_err();
        assert!(e.to_string().contains("within ±2^52"), "{e}");
        Ok(())
    })
}

#[test]
fn arithmetic_wraps_as_rust_wrapping_ops_do() -> locus::Result<()> {
    let a = values();
    let b: Vec<i64> = a.iter().rev().map(|&x| x ^ 0x5555_5555_5555).collect();
    let zip = |f: fn(i64, i64) -> i64| a.iter().zip(&b).map(|(&x, &y)| f(x, y)).collect::<Vec<_>>();
    let nonzero: Vec<i64> = b.iter().map(|&y| if y == 0 { 3 } else { y }).collect();
    on_both(|on| {
        let (x, y, z) = (t(on, &a, [a.len()])?, t(on, &b, [b.len()])?, t(on, &nonzero, [b.len()])?);
        assert_eq!((&x + &y)?.to_vec()?, zip(i64::wrapping_add));
        assert_eq!((&x - &y)?.to_vec()?, zip(i64::wrapping_sub));
        assert_eq!((&x * &y)?.to_vec()?, zip(i64::wrapping_mul));
        let div: Vec<i64> = a.iter().zip(&nonzero).map(|(&x, &y)| x.wrapping_div(y)).collect();
        assert_eq!((&x / &z)?.to_vec()?, div);
        // Scalars, and i64::MIN / -1, which wraps.
        let sc = |f: &dyn Fn(i64) -> i64| a.iter().map(|&v| f(v)).collect::<Vec<_>>();
        assert_eq!((&x + (1i64 << 62))?.to_vec()?, sc(&|v| v.wrapping_add(1 << 62)));
        assert_eq!((&x - i64::MIN)?.to_vec()?, sc(&|v| v.wrapping_sub(i64::MIN)));
        assert_eq!((&x * 3_000_000_019i64)?.to_vec()?, sc(&|v| v.wrapping_mul(3_000_000_019)));
        assert_eq!((&x / -1i64)?.to_vec()?, sc(&|v| v.wrapping_div(-1)));
        assert_eq!((&x / 1_000_000_007i64)?.to_vec()?, sc(&|v| v / 1_000_000_007));
        // Broadcasting: a row against a column.
        let (row, col) = (t(on, &a[..4], [1, 4])?, t(on, &b[..3], [3, 1])?);
        let want: Vec<i64> = b[..3].iter().flat_map(|&c| a[..4].iter().map(move |&r| r.wrapping_sub(c))).collect();
        assert_eq!((&row - &col)?.to_vec()?, want);
        // Integer division by zero is an error, by a tensor or a scalar.
        let e = (&x / &t(on, &vec![0; a.len()], [a.len()])?).unwrap_err();
        assert!(e.to_string().contains("division by zero"), "{e}");
        assert!((&x / 0i64).unwrap_err().to_string().contains("division by zero"));
        Ok(())
    })
}

#[test]
fn unary_ops_wrap_at_the_extremes() -> locus::Result<()> {
    let a = values();
    let map = |f: fn(i64) -> i64| a.iter().map(|&v| f(v)).collect::<Vec<_>>();
    on_both(|on| {
        let x = t(on, &a, [a.len()])?;
        assert_eq!((-&x)?.to_vec()?, map(i64::wrapping_neg));
        assert_eq!(x.abs()?.to_vec()?, map(i64::wrapping_abs));
        assert_eq!(x.square()?.to_vec()?, map(|v| v.wrapping_mul(v)));
        let (lo, hi) = (-(1i64 << 35), 1i64 << 41);
        assert_eq!(x.clamp(lo, hi)?.to_vec()?, map(|v| v.clamp(-(1 << 35), 1 << 41)));
        assert_eq!(x.relu()?.to_vec()?, map(|v| v.max(0)));
        Ok(())
    })
}

#[test]
fn whole_tensor_reductions_wrap_and_find_the_first_extreme() -> locus::Result<()> {
    // Long enough for the GPU's two-pass reductions (partials per block), with a sum that
    // wraps and extremes that sit past 32 bits.
    let n = 300_003usize;
    let v: Vec<i64> = (0..n as i64).map(|i| (i * 7_919_000_003) ^ (i << 33)).collect();
    let sum = v.iter().fold(0i64, |s, &x| s.wrapping_add(x));
    let (max, min) = (*v.iter().max().unwrap(), *v.iter().min().unwrap());
    let first = |m: i64| v.iter().position(|&x| x == m).unwrap() as i32;
    on_both(|on| {
        for len in [n, 5] {
            let x = t(on, &v[..len], [len])?;
            let part = &v[..len];
            assert_eq!(x.sum()?.item()?, part.iter().fold(0i64, |s, &x| s.wrapping_add(x)), "sum of {len}");
            assert_eq!(x.max()?.item()?, *part.iter().max().unwrap(), "max of {len}");
            assert_eq!(x.min()?.item()?, *part.iter().min().unwrap(), "min of {len}");
        }
        let x = t(on, &v, [n])?;
        assert_eq!(x.sum()?.item()?, sum);
        assert_eq!(x.argmax(0, false)?.item()?, first(max));
        assert_eq!(x.argmin(0, false)?.item()?, first(min));
        // Ties: the first index; the extremes themselves.
        let ties = t(on, &[i64::MIN, i64::MAX, 3, i64::MAX, i64::MIN], [5])?;
        assert_eq!(ties.argmax(0, false)?.item()?, 1);
        assert_eq!(ties.argmin(0, false)?.item()?, 0);
        assert_eq!(ties.sum()?.item()?, 1, "MIN + MAX + 3 + MAX + MIN wraps to 1");
        let (vals, idx) = ties.reshape([5, 1])?.max_dim(0, false)?;
        assert_eq!((vals.to_vec()?, idx.to_vec()?), (vec![i64::MAX], vec![1]));
        Ok(())
    })
}

#[test]
fn layout_ops_move_i64_values_unchanged() -> locus::Result<()> {
    let v: Vec<i64> = (0..24).map(|i| (i << 40) - i).collect();
    on_both(|on| {
        let x = t(on, &v, [2, 3, 4])?;
        assert_eq!(x.reshape([6, 4])?.narrow(0, 1, 2)?.to_vec()?, v[4..12]);
        assert_eq!(x.select(1, 2)?.to_vec()?, [&v[8..12], &v[20..24]].concat());
        let tr = x.transpose(0, 2)?;
        assert_eq!(tr.shape(), &[4, 3, 2]);
        assert_eq!(tr.to_vec()?[1], v[12], "[0, 0, 1] of the transpose is [1, 0, 0]");
        let m = x.reshape([6, 4])?.t()?.to_vec()?;
        assert_eq!(m[..6], [v[0], v[4], v[8], v[12], v[16], v[20]]);
        let cat = x.cat(&x)?;
        assert_eq!(cat.shape(), &[4, 3, 4]);
        assert_eq!(cat.to_vec()?, [&v[..], &v[..]].concat());
        let st = Tensor::stack(&[&x.select(0, 0)?, &x.select(0, 1)?], 0)?;
        assert_eq!(st.to_vec()?, v);
        let rows = x.reshape([6, 4])?.index_select(0, &Tensor::<Dyn, i32>::from_vec_on(on, vec![5, 0], [2])?)?;
        assert_eq!(rows.to_vec()?, [&v[20..24], &v[..4]].concat());
        // Integer matmul of i64: wrapping products and sums.
        let (a, b) = (t(on, &v[..6], [2, 3])?, t(on, &v[6..12], [3, 2])?);
        let want: Vec<i64> = (0..2)
            .flat_map(|i| {
                let v = &v;
                (0..2)
                    .map(move |j| (0..3).fold(0i64, |s, k| s.wrapping_add(v[i * 3 + k].wrapping_mul(v[6 + k * 2 + j]))))
            })
            .collect();
        assert_eq!(a.matmul(&b)?.to_vec()?, want);
        Ok(())
    })
}

#[test]
fn i64_indices_and_targets_work_as_i32_ones_do() -> locus::Result<()> {
    on_both(|on| {
        let table = Tensor::<Dyn>::from_vec_on(on, vec![0.0, 0.5, 1.0, 1.5, 2.0, 2.5], [3, 2])?;
        let (i32s, i64s) = (Tensor::<Dyn, i32>::from_vec_on(on, vec![2, 0, 2], [3])?, t(on, &[2, 0, 2], [3])?);
        assert_eq!(table.index_select(0, &i64s)?.to_vec()?, table.index_select(0, &i32s)?.to_vec()?);
        assert_eq!(table.index_select(1, &t(on, &[1], [1])?)?.to_vec()?, vec![0.5, 1.5, 2.5]);
        // Out of range: the first bad index in list order, with its true value.
        for (idx, says) in [
            (vec![0, 3, -1], "index 3 (at position 1)"),
            (vec![0, 1 << 40, -1], "index 1099511627776 (at position 1)"),
            (vec![0, 7, i64::MIN], "index 7 (at position 1)"),
            (vec![i64::MIN, 7], "index -9223372036854775808 (at position 0)"),
        ] {
            let e = table.index_select(0, &t(on, &idx, [idx.len()])?).unwrap_err();
            assert!(e.to_string().contains(says), "{idx:?}: {e}");
        }
        // cross_entropy and one_hot.
        let logits = Tensor::<Dyn>::from_vec_on(on, vec![0.0, 1.0, 2.0, 3.0, 1.0, 0.0], [2, 3])?;
        let want = logits.cross_entropy(&Tensor::<Dyn, i32>::from_vec_on(on, vec![2, 0], [2])?)?.item()?;
        assert_eq!(logits.cross_entropy(&t(on, &[2, 0], [2])?)?.item()?, want);
        let e = logits.cross_entropy(&t(on, &[1, 1 << 35], [2])?).unwrap_err();
        assert!(e.to_string().contains("target 34359738368 of sample 1 is out of range for 3 classes"), "{e}");
        let e = logits.cross_entropy(&t(on, &[-4, 1], [2])?).unwrap_err();
        assert!(e.to_string().contains("target -4 of sample 0"), "{e}");
        let hot = t(on, &[2, 0], [2])?.one_hot::<i64>(3)?;
        assert_eq!(hot.to_vec()?, vec![0, 0, 1, 1, 0, 0]);
        assert!(t(on, &[0, 1 << 33], [2])?.one_hot::<f32>(4).is_err());
        Ok(())
    })
}
