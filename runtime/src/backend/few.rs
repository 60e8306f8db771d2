//! Short lists of references without an allocation: a graph replay passes its inputs and
//! outputs down as slices, usually a handful, once per replay.

use crate::error::Result;

/// Up to this many references go on the stack.
const ON_STACK: usize = 8;

/// Calls `f` with the references `items` yields, in order, as one slice: on the stack for
/// up to [`ON_STACK`] of them, else in a `Vec`. The first error an item gives is returned
/// instead, and `f` is not called.
pub(crate) fn with_refs<'b, T: ?Sized + 'b, R>(
    mut items: impl ExactSizeIterator<Item = Result<&'b T>>,
    f: impl FnOnce(&[&'b T]) -> Result<R>,
) -> Result<R> {
    if items.len() > ON_STACK {
        let all = items.collect::<Result<Vec<_>>>()?;
        return f(&all);
    }
    let Some(first) = items.next() else { return f(&[]) };
    // Every slot starts as the first reference; only those written below are handed on.
    let mut on_stack = [first?; ON_STACK];
    let mut len = 1;
    for (slot, item) in on_stack[1..].iter_mut().zip(items) {
        *slot = item?;
        len += 1;
    }
    f(&on_stack[..len])
}

#[cfg(test)]
mod tests {
    use super::with_refs;
    use crate::error::{Error, Result};

    fn collect(n: usize, fail_at: Option<usize>) -> Result<Vec<u32>> {
        let values: Vec<u32> = (0..n as u32).map(|i| i * 7 + 1).collect();
        let items = values.iter().enumerate().map(|(i, v)| match fail_at == Some(i) {
            true => Err(Error::InvalidArgument { op: "test", reason: format!("item {i}") }),
            false => Ok(v),
        });
        with_refs(items, |refs| Ok(refs.iter().map(|&&v| v).collect()))
    }

    #[test]
    fn every_reference_arrives_in_order_on_the_stack_and_past_it() {
        for n in [0, 1, 2, 7, 8, 9, 20] {
            assert_eq!(collect(n, None).unwrap(), (0..n as u32).map(|i| i * 7 + 1).collect::<Vec<_>>(), "{n} items");
        }
    }

    #[test]
    fn the_first_error_is_returned_and_nothing_is_called() {
        for (n, at) in [(1, 0), (5, 3), (20, 12)] {
            match collect(n, Some(at)) {
                Err(Error::InvalidArgument { reason, .. }) => assert_eq!(reason, format!("item {at}")),
                other => panic!("{n} items failing at {at}: {other:?}"),
            }
        }
    }
}
