//! The reduction arithmetic: how the ranks' elements combine under a [`ReduceOp`].

use super::ReduceOp;
use crate::element::Element;

/// The element-wise combination of `a` and `b`.
fn combine<T: Element>(op: ReduceOp, a: T, b: T) -> T {
    let is_nan = |x: T| x.partial_cmp(&x).is_none();
    match op {
        ReduceOp::Sum | ReduceOp::Avg => a.add(b),
        ReduceOp::Max => a.max_of(b),
        ReduceOp::Min => {
            if is_nan(a) || a <= b {
                a
            } else {
                b
            }
        }
    }
}

/// `parts` (one per rank, in rank order) reduced element-wise in rank order.
pub(super) fn reduce<T: Element>(op: ReduceOp, parts: &[&[T]], world_size: usize) -> Vec<T> {
    let mut acc = parts[0].to_vec();
    for part in &parts[1..] {
        for (a, &b) in acc.iter_mut().zip(part.iter()) {
            *a = combine(op, *a, b);
        }
    }
    if op == ReduceOp::Avg {
        let n = T::from_f64(world_size as f64);
        for a in &mut acc {
            *a = a.div(n).unwrap_or(T::ZERO);
        }
    }
    acc
}
