//! Gradient bucketing (PyTorch DDP's reducer, the synchronous part): many small
//! gradients averaged across the ranks with a few large `all_reduce` calls.

use super::{ProcessGroup, ReduceOp};
use crate::device::Device;
use crate::element::Element;
use crate::error::Result;
use crate::tensor::Tensor;

/// The bucket size of [`all_reduce_avg_bucketed`] when there is no reason to pick
/// another: 25 MiB, PyTorch DDP's `bucket_cap_mb` default.
pub const DEFAULT_BUCKET_BYTES: usize = 25 * 1024 * 1024;

/// Averages every gradient across the ranks of `group`, in place: `*grads[i]` becomes the
/// element-wise mean over the ranks of their `grads[i]` (PyTorch DDP's gradient
/// synchronisation).
///
/// Consecutive gradients are grouped into buckets of at most `bucket_bytes` bytes (a
/// gradient larger than that is a bucket of its own; `0` makes every gradient its own
/// bucket); each bucket is flattened into one tensor, averaged with one
/// [`ProcessGroup::all_reduce`] of [`ReduceOp::Avg`], and cut back into the gradients'
/// shapes. Every bucket's `all_reduce` is started (with
/// [`ProcessGroup::all_reduce_async`]: on the group's communication stream with NCCL, on
/// its worker thread over TCP) as soon as the bucket is laid out, before the first is
/// waited for, so the exchanges overlap the work left on this thread and on the device;
/// the gradients written back wait for them by the usual stream rules. The reduction is
/// element-wise, so the results are bit-identical to one
/// `all_reduce(g, ReduceOp::Avg)` per gradient, whatever the bucket size.
///
/// Every rank must pass gradients of the same shapes in the same order and the same
/// `bucket_bytes` (the collectives must match); the gradients of one bucket must be on
/// one device (the tensors are concatenated). The results keep each gradient's shape and
/// placement. Buckets with no elements are skipped (on every rank alike).
///
/// ```
/// # extern crate locus_runtime as locus;
/// use std::sync::Arc;
/// use std::time::Duration;
/// use locus::dist::{all_reduce_avg_bucketed, FileStore, ProcessGroup, Store, DEFAULT_BUCKET_BYTES};
/// use locus::{Cpu, Tensor};
/// let dir = std::env::temp_dir().join(format!("locus-doc-bucket-{}", std::process::id()));
/// # std::fs::remove_dir_all(&dir).ok();
/// let store: Arc<dyn Store> = Arc::new(FileStore::new(&dir, Duration::from_secs(10))?);
/// let rank = |r: usize| {
///     let store = Arc::clone(&store);
///     std::thread::spawn(move || -> locus::Result<Vec<Vec<f32>>> {
///         let pg = ProcessGroup::new(store, r, 2, Duration::from_secs(10))?;
///         let mut w = Tensor::<Cpu>::full([2, 2], r as f32)?;
///         let mut b = Tensor::<Cpu>::full([2], 10.0 * r as f32)?;
///         all_reduce_avg_bucketed(&pg, &mut [&mut w, &mut b], DEFAULT_BUCKET_BYTES)?;
///         Ok(vec![w.to_vec()?, b.to_vec()?])
///     })
/// };
/// let (a, b) = (rank(0), rank(1));
/// let want = vec![vec![0.5; 4], vec![5.0; 2]];
/// assert_eq!(a.join().unwrap()?, want);
/// assert_eq!(b.join().unwrap()?, want);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), locus::Error>(())
/// ```
pub fn all_reduce_avg_bucketed<D: Device, T: Element>(
    group: &ProcessGroup,
    grads: &mut [&mut Tensor<D, T>],
    bucket_bytes: usize,
) -> Result<()> {
    let sizes: Vec<usize> = grads.iter().map(|g| g.numel().saturating_mul(T::DTYPE.size())).collect();
    // Every bucket is started before the first is waited for: each one's exchange runs
    // (on the communication stream, or the group's worker) while the next is laid out.
    let mut started = Vec::new();
    let mut start = 0;
    for end in bucket_ends(&sizes, bucket_bytes) {
        let bucket = &grads[start..end];
        if bucket.iter().any(|g| g.numel() > 0) {
            let flat = match bucket {
                [g] => g.reshape([g.numel()])?,
                _ => {
                    let flat: Vec<Tensor<D, T>> =
                        bucket.iter().map(|g| g.reshape([g.numel()])).collect::<Result<_>>()?;
                    Tensor::concat(&flat.iter().collect::<Vec<_>>())?
                }
            };
            started.push((start..end, group.all_reduce_async(&flat, ReduceOp::Avg)?));
        }
        start = end;
    }
    for (range, work) in started {
        let avg = work.wait()?;
        let mut offset = 0;
        for g in &mut grads[range] {
            let n = g.numel();
            let shape = g.shape().to_vec();
            **g = avg.narrow(0, offset, n)?.reshape(shape)?;
            offset += n;
        }
    }
    Ok(())
}

/// The end (exclusive) of each bucket: consecutive tensors of `sizes` bytes, at most
/// `bucket_bytes` a bucket unless one tensor alone is larger.
pub(super) fn bucket_ends(sizes: &[usize], bucket_bytes: usize) -> Vec<usize> {
    let mut ends = Vec::new();
    let mut filled: Option<usize> = None;
    for (i, &size) in sizes.iter().enumerate() {
        match filled {
            Some(f) if size == 0 || f.checked_add(size).is_some_and(|s| s <= bucket_bytes) => filled = Some(f + size),
            Some(_) => {
                ends.push(i);
                filled = Some(size);
            }
            None => filled = Some(size),
        }
    }
    if filled.is_some() {
        ends.push(sizes.len());
    }
    ends
}

#[cfg(test)]
mod tests {
    use super::bucket_ends;

    #[test]
    fn buckets_are_consecutive_and_at_most_the_size() {
        assert_eq!(bucket_ends(&[], 10), Vec::<usize>::new());
        assert_eq!(bucket_ends(&[4, 4, 4], 10), vec![2, 3]);
        assert_eq!(bucket_ends(&[4, 4, 4], 12), vec![3]);
        // A tensor larger than the bucket is a bucket of its own.
        assert_eq!(bucket_ends(&[4, 40, 4, 4], 10), vec![1, 2, 4]);
        assert_eq!(bucket_ends(&[40], 10), vec![1]);
        // Size 0: every tensor alone, except empty ones, which fit anywhere.
        assert_eq!(bucket_ends(&[4, 4, 0, 4], 0), vec![1, 3, 4]);
        assert_eq!(bucket_ends(&[4, 4, 4], usize::MAX), vec![3]);
        assert_eq!(bucket_ends(&[usize::MAX, 1], usize::MAX), vec![1, 2]);
    }
}
