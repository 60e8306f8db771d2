//! `index_select` (gather.cu): rows picked along one dim, copied in whole rows split over
//! the worker pool. Every index is checked before anything is written, in order, so the
//! error names the first bad one, as the GPU's check does. And its gradient, `index_add`.

use crate::backend::host::kernels::{COPY_GRAIN, GRAIN};
use crate::backend::workers::split_mut;
use crate::backend::Gather;
use crate::element::Element;
use crate::error::Result;

/// The rows `index` picks along the middle dim of `g`, of elements of `size` bytes, from
/// `x` into `out` (`g.out_len()` elements), after checking every index.
pub(in crate::backend) fn index_select(x: &[u8], index: &[i32], out: &mut [u8], size: usize, g: Gather) -> Result<()> {
    for (at, &t) in index.iter().enumerate() {
        if usize::try_from(t).map_or(true, |t| t >= g.size) {
            return Err(g.out_of_range(at, t.into()));
        }
    }
    let row = g.inner * size;
    if out.is_empty() || row == 0 {
        return Ok(());
    }
    split_mut(out, row, (COPY_GRAIN / row).max(1), &|start, out| {
        for (k, dst) in out.chunks_mut(row).enumerate() {
            let r = start / row + k;
            let (o, j) = (r / g.count, r % g.count);
            // Checked above: 0 <= index[j] < g.size.
            let from = (o * g.size + index[j] as usize) * row;
            dst.copy_from_slice(&x[from..from + row]);
        }
        Ok(())
    })
}

/// The gradient of [`index_select`]: `g` (`[outer, count, inner]`) added into the rows of
/// `out` (`[outer, size, inner]`) that its indices picked, in the order of the list (in
/// f64); rows no index picked are 0, and an index out of range picks none.
pub(in crate::backend) fn index_add<T: Element>(g: &[T], index: &[i32], out: &mut [T], gather: Gather) -> Result<()> {
    let Gather { size, inner, count, .. } = gather;
    if out.is_empty() || inner == 0 {
        return Ok(());
    }
    // Where each row was picked, in order.
    let mut picks = vec![Vec::new(); size];
    for (c, &t) in index.iter().enumerate() {
        if let Some(at) = usize::try_from(t).ok().and_then(|t| picks.get_mut(t)) {
            at.push(c);
        }
    }
    split_mut(out, inner, (GRAIN / inner).max(1), &|start, out| {
        let mut sum = vec![0f64; inner];
        for (k, dst) in out.chunks_mut(inner).enumerate() {
            let r = start / inner + k;
            let (o, s) = (r / size, r % size);
            sum.fill(0.0);
            for &c in &picks[s] {
                let row = &g[(o * count + c) * inner..][..inner];
                sum.iter_mut().zip(row).for_each(|(a, v)| *a += v.to_f64());
            }
            dst.iter_mut().zip(&sum).for_each(|(d, &a)| *d = T::from_f64(a));
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_index_is_reported_before_anything_is_written() {
        let g = Gather { dim: 0, outer: 1, size: 3, inner: 1, count: 3 };
        let mut out = vec![7u8; 3];
        let e = index_select(&[1, 2, 3], &[0, 5, -1], &mut out, 1, g).unwrap_err();
        assert!(e.to_string().contains("index 5 (at position 1) is out of range for dim 0 of size 3"), "{e}");
        assert_eq!(out, vec![7; 3]);
    }

    #[test]
    fn index_add_sums_the_rows_each_index_picked_in_list_order() {
        // [outer 2, count 4, inner 2] into [2, size 3, 2]: row 1 picked twice, row 2 never;
        // an index out of range picks nothing.
        let g = Gather { dim: 1, outer: 2, size: 3, inner: 2, count: 4 };
        let grad: Vec<f32> = (1..=16).map(|v| v as f32).collect();
        let mut out = vec![f32::NAN; 12];
        index_add(&grad, &[1, 0, 1, 5], &mut out, g).unwrap();
        assert_eq!(out, vec![3.0, 4.0, 1.0 + 5.0, 2.0 + 6.0, 0.0, 0.0, 11.0, 12.0, 9.0 + 13.0, 10.0 + 14.0, 0.0, 0.0]);
        index_add(&grad, &[-1, i32::MIN, 0, 3], &mut out, g).unwrap();
        assert_eq!(out, vec![5.0, 6.0, 0.0, 0.0, 0.0, 0.0, 13.0, 14.0, 0.0, 0.0, 0.0, 0.0]);
    }
}
