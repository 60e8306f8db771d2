//! `index_select` (gather.cu): rows picked along one dim, copied in whole rows split over
//! the worker pool. Every index is checked before anything is written, in order, so the
//! error names the first bad one, as the GPU's check does.

use crate::backend::host::kernels::COPY_GRAIN;
use crate::backend::workers::split_mut;
use crate::backend::Gather;
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
}
