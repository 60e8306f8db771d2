//! `index_select` (issue 20): on cuda:0 of the selected backend and on `Cpu`, against a
//! plain-Rust gather, over every dim of random shapes with repeated and empty index
//! lists, for element types of every width, u8, bf16, i32, f32 and f64 (the GPU copies
//! 1- to 16-byte units, and long rows a block per row: the embedding lookup); then the
//! errors: indices out of range (named, the first one; even when the result is empty),
//! shapes and placements; and graph captures, where the indices are an input of the graph
//! checked before each replay, and indices computed in the capture are refused.

use locus::{bf16, Cpu, Cuda, DeviceId, Element, Error, Float, Graph, Param, Stream, Tensor};
use proptest::prelude::*;

type G = Cuda<0>;

/// `x` of `shape` with `dim` replaced by the slices `index` picks, by the definition.
fn reference<T: Copy>(x: &[T], shape: &[usize], dim: usize, index: &[i32]) -> Vec<T> {
    let outer: usize = shape[..dim].iter().product();
    let inner: usize = shape[dim + 1..].iter().product();
    let mut out = Vec::new();
    for o in 0..outer {
        for &t in index {
            let from = (o * shape[dim] + t as usize) * inner;
            out.extend_from_slice(&x[from..from + inner]);
        }
    }
    out
}

/// Checks `index_select` of `x` on cuda:0 and on the host against the reference.
fn check<T: Element>(x: &[T], shape: &[usize], dim: usize, index: &[i32]) -> locus::Result<()> {
    let want = reference(x, shape, dim, index);
    let mut want_shape = shape.to_vec();
    want_shape[dim] = index.len();
    let ids = [index.len()];
    let g = Tensor::<G, T>::from_slice(x, shape)?.index_select(dim, &Tensor::<G, i32>::from_slice(index, ids)?)?;
    let c = Tensor::<Cpu, T>::from_slice(x, shape)?.index_select(dim, &Tensor::<Cpu, i32>::from_slice(index, ids)?)?;
    for (got, name) in [(g.shape(), "cuda:0"), (c.shape(), "cpu")] {
        assert_eq!(got, &want_shape[..], "{} {shape:?} dim {dim} on {name}", T::DTYPE);
    }
    assert_eq!(g.to_vec()?, want, "{} {shape:?} dim {dim} index {index:?} on cuda:0", T::DTYPE);
    assert_eq!(c.to_vec()?, want, "{} {shape:?} dim {dim} index {index:?} on cpu", T::DTYPE);
    Ok(())
}

/// A shape of rank 1..=4 with dims 0..=5, a dim of it, and up to 7 indices in range
/// (none when the dim is empty).
fn case() -> impl Strategy<Value = (Vec<usize>, usize, Vec<i32>)> {
    proptest::collection::vec(0usize..=5, 1..=4)
        .prop_flat_map(|s| {
            let rank = s.len();
            (Just(s), 0..rank)
        })
        .prop_flat_map(|(s, dim)| {
            let size = s[dim];
            let n = if size == 0 { 0..=0 } else { 0..=7 };
            (Just(s), Just(dim), proptest::collection::vec(0..size.max(1) as i32, n))
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn index_select_matches_the_reference((shape, dim, index) in case()) {
        let n: usize = shape.iter().product();
        let ints: Vec<i32> = (0..n as i32).map(|i| i * 7 - 50).collect();
        check(&ints, &shape, dim, &index).unwrap();
        let floats: Vec<f32> = ints.iter().map(|&i| i as f32 * 0.5).collect();
        check(&floats, &shape, dim, &index).unwrap();
        let bytes: Vec<u8> = ints.iter().map(|&i| i as u8).collect();
        check(&bytes, &shape, dim, &index).unwrap();
        let doubles: Vec<f64> = ints.iter().map(|&i| i as f64 - 0.25).collect();
        check(&doubles, &shape, dim, &index).unwrap();
        let halves: Vec<bf16> = ints.iter().map(|&i| bf16::from_f32(i as f32)).collect();
        check(&halves, &shape, dim, &index).unwrap();
    }
}

#[test]
fn embedding_rows_in_every_width() -> locus::Result<()> {
    let ids = [3, 0, 49, 3, 17, 17, 2];
    // Rows of 64 f32 (whole 16-byte vectors, a block per row), 3 f32 (4-byte units, a
    // thread each), 1000 u8 (8-byte units), 33 u8 (bytes), 6 f64 (16-byte units).
    let table: Vec<f32> = (0..50 * 64).map(|i| i as f32).collect();
    check(&table, &[50, 64], 0, &ids)?;
    check(&table[..150], &[50, 3], 0, &ids)?;
    let bytes: Vec<u8> = (0..50 * 1000).map(|i| (i % 251) as u8).collect();
    check(&bytes, &[50, 1000], 0, &ids)?;
    check(&bytes[..50 * 33], &[50, 33], 0, &ids)?;
    let wide: Vec<f64> = (0..50 * 6).map(|i| i as f64).collect();
    check(&wide, &[50, 6], 0, &ids)?;
    // 16-bit rows: 3 (2-byte units), 4 (8-byte), 4096 (16-byte vectors, a block per row).
    let halves: Vec<bf16> = (0..50 * 4096).map(|i| bf16::from_f32((i % 1000) as f32)).collect();
    check(&halves[..150], &[50, 3], 0, &ids)?;
    check(&halves[..200], &[50, 4], 0, &ids)?;
    check(&halves, &[50, 4096], 0, &ids)?;
    // A long index list over a [vocab, hidden] table, and picks along the last dim.
    let many: Vec<i32> = (0..5000).map(|i| i * 31 % 50).collect();
    check(&table, &[50, 64], 0, &many)?;
    check(&table, &[50, 64], 1, &[63, 0, 63, 5])?;
    check(&table, &[2, 25, 64], 1, &[24, 0, 24])?;
    Ok(())
}

/// The gradient of `index_select` of `shape` along `dim` by `index` on cuda:0, the
/// output's gradient small whole numbers (exact sums in every type), against the
/// definition: each row of the input's gradient sums the output gradient's rows whose
/// index picked it, rows never picked 0.
fn gradient<T: Float>(shape: &[usize], dim: usize, index: &[i32]) -> locus::Result<()> {
    let (outer, size, inner) =
        (shape[..dim].iter().product::<usize>(), shape[dim], shape[dim + 1..].iter().product::<usize>());
    let x = Param::new(Tensor::<G, T>::zeros(shape)?);
    let y = x.index_select(dim, &Tensor::<G, i32>::from_slice(index, [index.len()])?)?;
    let g: Vec<f64> = (0..y.numel()).map(|i| ((i * 7919) % 13) as f64 - 6.0).collect();
    let weights = Tensor::<G, T>::from_vec(g.iter().map(|&v| T::from_f64(v)).collect(), y.shape())?;
    (&y * &weights)?.sum()?.backward()?;
    let mut want = vec![0.0; outer * size * inner];
    for o in 0..outer {
        for (c, &t) in index.iter().enumerate() {
            for k in 0..inner {
                want[(o * size + t as usize) * inner + k] += g[(o * index.len() + c) * inner + k];
            }
        }
    }
    let got: Vec<f64> = x.grad().expect("a gradient").to_vec()?.into_iter().map(T::to_f64).collect();
    let want: Vec<f64> = want.into_iter().map(|v| T::from_f64(v).to_f64()).collect();
    let first = got.iter().zip(&want).position(|(a, b)| a != b);
    assert!(
        got.len() == want.len() && first.is_none(),
        "{} {shape:?} dim {dim}, {} indices: element {first:?} is {:?}, not {:?}",
        T::DTYPE,
        index.len(),
        first.map(|i| got[i]),
        first.map(|i| want[i])
    );
    Ok(())
}

/// The embedding's backward: rows of many warps and of less than one, lists longer than
/// a warp's 32, rows picked many times and never, an outer dim, no index at all.
#[test]
fn index_select_gradients_sum_the_rows_each_index_picked() -> locus::Result<()> {
    let many: Vec<i32> = (0..300).map(|i| (i * i + 7) % 41).collect(); // rows 41..50 never
    for (shape, dim, index) in [
        (&[50, 70][..], 0, &many[..]),
        (&[50, 3], 0, &many),
        (&[3, 45, 5], 1, &many[..37]),
        (&[4, 2, 40], 0, &[3, 3, 3, 1][..]),
        (&[6, 33], 1, &[32, 0, 32]),
        (&[5, 8], 0, &[]),
    ] {
        gradient::<f32>(shape, dim, index)?;
        gradient::<f64>(shape, dim, index)?;
        gradient::<bf16>(shape, dim, index)?;
    }
    Ok(())
}

#[test]
fn an_index_out_of_range_is_an_error_naming_it_and_the_size() -> locus::Result<()> {
    let x = Tensor::<G, i32>::from_vec((0..24).collect(), [2, 3, 4])?;
    for dim in 0..3 {
        let size = x.shape()[dim] as i32;
        for (index, at, bad) in [(vec![0, -1], 1, -1), (vec![size, 0], 0, size), (vec![0, 0, i32::MAX], 2, i32::MAX)] {
            let e = x.index_select(dim, &Tensor::<G, i32>::from_vec(index.clone(), [index.len()])?).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument { op: "index_select", .. }), "{e}");
            let want = format!("index {bad} (at position {at}) is out of range for dim {dim} of size {size}");
            assert!(e.to_string().contains(&want), "{e}");
            let c = Tensor::<Cpu, i32>::from_vec((0..24).collect(), [2, 3, 4])?;
            let e = c.index_select(dim, &Tensor::<Cpu, i32>::from_vec(index.clone(), [index.len()])?).unwrap_err();
            assert!(e.to_string().contains(&want), "on cpu: {e}");
        }
    }
    // The first bad index in the list is the one named, among many, on every path.
    let mut index: Vec<i32> = vec![1; 3000];
    (index[2500], index[1234], index[2999]) = (-7, 9, 100);
    let table = Tensor::<G>::zeros([5, 64])?;
    let ids = Tensor::<G, i32>::from_slice(&index, [3000])?;
    for (t, dim) in [(table.clone(), 0), (table.reshape([64, 5])?, 1), (table.reshape([5, 4, 16])?, 0)] {
        let e = t.index_select(dim, &ids).unwrap_err();
        let size = t.shape()[dim];
        assert!(
            e.to_string().contains(&format!("index 9 (at position 1234) is out of range for dim {dim} of size {size}")),
            "{e}"
        );
    }
    // An empty result still checks its indices; an empty index list checks nothing.
    let empty = Tensor::<G>::zeros([0, 5])?;
    let e = empty.index_select(1, &Tensor::<G, i32>::from_vec(vec![2, 5], [2])?).unwrap_err();
    assert!(e.to_string().contains("index 5 (at position 1) is out of range for dim 1 of size 5"), "{e}");
    assert_eq!(empty.index_select(1, &Tensor::<G, i32>::from_vec(vec![4, 0], [2])?)?.shape(), &[0, 2]);
    let e = empty.index_select(0, &Tensor::<G, i32>::from_vec(vec![0], [1])?).unwrap_err();
    assert!(e.to_string().contains("index 0 (at position 0) is out of range for dim 0 of size 0"), "{e}");
    let none = x.index_select(1, &Tensor::<G, i32>::zeros([0])?)?;
    assert_eq!((none.shape(), none.numel()), (&[2, 0, 4][..], 0));
    // The tensors stay usable after an error.
    let ok = x.index_select(2, &Tensor::<G, i32>::from_vec(vec![3], [1])?)?;
    assert_eq!(ok.to_vec()?, vec![3, 7, 11, 15, 19, 23]);
    Ok(())
}

#[test]
fn index_select_errors_for_shapes_dims_and_placements() -> locus::Result<()> {
    let x = Tensor::<G>::zeros([2, 3])?;
    let ids = Tensor::<G, i32>::zeros([2])?;
    let e = x.index_select(2, &ids).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { op: "index_select", .. }) && e.to_string().contains("[2, 3]"), "{e}");
    for shape in [vec![], vec![2, 1]] {
        let e = x.index_select(0, &Tensor::<G, i32>::zeros(&shape)?).unwrap_err();
        assert!(e.to_string().contains("needs a 1-d index"), "{shape:?}: {e}");
    }
    let e = Tensor::<G>::full([], 1.0)?.index_select(0, &ids).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { op: "index_select", .. }), "{e}");
    // Dyn placements are checked at run time.
    let e = x.clone().into_dyn().index_select(0, &Tensor::<Cpu, i32>::zeros([1])?.into_dyn()).unwrap_err();
    assert_eq!(e, Error::DeviceMismatch { op: "index_select", lhs: DeviceId::Cuda(0), rhs: DeviceId::Cpu });
    assert_eq!(x.clone().into_dyn().index_select(1, &ids.clone().into_dyn())?.shape(), &[2, 2]);
    assert_eq!(x.index_select(1, &ids.into_dyn())?.shape(), &[2, 2], "a static tensor and a Dyn index");
    Ok(())
}

#[test]
fn index_ops_in_a_graph_check_the_input_indices_before_each_replay() -> locus::Result<()> {
    let s = Stream::<G>::new()?;
    let values = vec![0.0, 1.0, 2.0, 2.0, 1.0, 0.0, 5.0, 5.0];
    let (mut logits, mut ids) =
        (Tensor::<G>::from_vec(values.clone(), [4, 2])?, Tensor::<G, i32>::from_vec(vec![1, 0, 1, 1], [4])?);
    let eager = Tensor::<G>::from_vec(values, [4, 2])?;
    let mut g = Graph::capture(&s, (&mut logits, &mut ids), |(logits, ids)| {
        Ok((logits.index_select(0, ids)?, logits.cross_entropy(ids)?))
    })?;
    let want = |ids: &[i32]| -> locus::Result<(Vec<f32>, Vec<f32>)> {
        let ids = Tensor::<G, i32>::from_vec(ids.to_vec(), [4])?;
        Ok((eager.index_select(0, &ids)?.to_vec()?, eager.cross_entropy(&ids)?.to_vec()?))
    };
    let read = |(rows, loss): (locus::Output<'_, G>, locus::Output<'_, G>)| -> locus::Result<(Vec<f32>, Vec<f32>)> {
        Ok((rows.to_vec()?, loss.to_vec()?))
    };
    let first = read(g.replay()?)?;
    assert_eq!(first, want(&[1, 0, 1, 1])?);
    // Out of range for the rows (and the classes): index_select's error, as eager, and the
    // graph does not run: the outputs keep the last replay's values.
    for (bad, op) in
        [(vec![0, 1, 9, 0], "index_select"), (vec![0, 1, 3, 0], "cross_entropy"), (vec![-1, 1, 0, 0], "index_select")]
    {
        g.inputs_mut().1.copy_from_slice(&bad)?;
        let e = g.replay().map(|_| ()).unwrap_err();
        let eager_e = match op {
            "index_select" => eager.index_select(0, &Tensor::<G, i32>::from_vec(bad.clone(), [4])?).map(|_| ()),
            _ => eager.cross_entropy(&Tensor::<G, i32>::from_vec(bad.clone(), [4])?).map(|_| ()),
        }
        .unwrap_err();
        assert_eq!(e, eager_e, "{bad:?}");
        assert!(matches!(e, Error::InvalidArgument { op: o, .. } if o == op), "{bad:?}: {e}");
        assert_eq!(read(g.outputs()?)?, first, "{bad:?}: the graph ran");
    }
    g.inputs_mut().1.copy_from_slice(&[0, 1, 1, 0])?;
    assert_eq!(read(g.replay()?)?, want(&[0, 1, 1, 0])?);
    Ok(())
}

#[test]
fn indices_computed_in_a_capture_are_refused() -> locus::Result<()> {
    let s = Stream::<G>::new()?;
    let mut logits = Tensor::<G>::from_vec(vec![0.0, 1.0, 2.0, 2.0, 1.0, 0.0, 5.0, 5.0], [4, 2])?;
    let mut ids = Tensor::<G, i32>::from_vec(vec![1, 0, 1, 1], [4])?;
    let mut refused = Vec::new();
    let mut g = Graph::capture(&s, (&mut logits, &mut ids), |(logits, ids)| {
        let made = ids.to_dtype::<f32>()?.to_dtype::<i32>()?;
        for r in [logits.index_select(0, &made).map(|_| ()), logits.cross_entropy(&made).map(|_| ())] {
            match r {
                Err(Error::NotCapturable { op, reason }) => {
                    assert!(reason.contains("computed in the capture"), "{reason}");
                    refused.push(op);
                }
                other => panic!("expected NotCapturable, got {other:?}"),
            }
        }
        // Softmax checks nothing: it is captured.
        logits.softmax(1)
    })?;
    assert_eq!(refused, vec!["index_select", "cross_entropy"]);
    assert_eq!(g.replay()?.to_vec()?[6..], [0.5, 0.5]);
    Ok(())
}
