//! Shapes on good and bad input (issues 14 and 38): every public op of `Tensor`, on every
//! element type it takes, returns `Ok` with the shape PyTorch's rules give when its input
//! is valid, an `Err` when it is not, and never panics or hangs, whatever the shapes.
//!
//! The focused tests come first: the cases of issue 14 (dims whose product overflows on
//! empty tensors, results too large to exist, hangs on huge empty dims) and the bugs the
//! property found. Then the property, [`fuzz`] (two tests, float and integer types, side by side):
//!
//! * Inputs: shapes of rank 0 to 4 with dims 0 to 5; in a third of them one dim large but
//!   feasible (64, 4096) or huge (2^20 up to `usize::MAX`), most often beside a 0 so that
//!   the tensor is empty and can exist (`[0, usize::MAX / 2]`: its dims, a 0 counted as
//!   1, must span at most `isize::MAX` bytes). The second operand, the matmul rhs, the cat
//!   partner, the `where` mask and the reshape target are mostly derived from the first
//!   (equal, broadcastable, a suffix, `[k, n]` for `[m, k]`, one dim changed...), so most
//!   calls are valid and some are not; dims, `narrow` ranges, chunk, stack and class
//!   counts, index and target values, and `arange` bounds are in and out of range
//!   (`usize::MAX`, `i32::MAX`, -1, past `i32::MAX`, `i64::MIN`).
//! * Every case runs on all 7 element types (f32, f64, bf16, f16, i32, i64, u8), on
//!   `Cpu`, on `Cuda<0>` (simulated by the host backend) and on one of `Pinned`,
//!   `Cuda<1>` and `Dyn` at cpu, cuda:0 or cuda:1.
//! * For each call a small reference (the [`rule`] module) gives the shapes and element
//!   types of the results, or says that the input is invalid. Invalid input must be an
//!   `Err`. Valid input must be `Ok` with exactly the reference's shapes, element types and
//!   device, unless the result cannot exist (its dims span more than `isize::MAX` bytes,
//!   or at least 256 TiB, more than any address space), which must be an `Err`; a result
//!   large but possible (over [`BUDGET`] bytes, under 256 TiB) is not asked for. A panic
//!   fails the case, a call running for over 20 s ends the process (a hang).
//! * The three placements must give the same outcome (the same shapes, or an error)
//!   call for call.
//! * At the end every op must have succeeded on every element type it takes at least
//!   once, and every call that is always invalid must have been tried, so the generator
//!   cannot drift into testing errors only.
//!
//! The ops: 99 names, 146 distinct calls counting their forms (134 that must succeed on
//! some input, 12 that are always invalid), each on every element type it takes (the
//! counts per op and type are printed): factories (`zeros`, `ones`, `full`, `from_vec`,
//! `from_slice`, `arange`, and on floats `rand`, `randn`; their static and `_current`
//! forms); `+ - * /` of two tensors (broadcasting) and with a scalar on either side,
//! integer division by zero; `neg`, `relu`, `abs`, `square`, `clamp`; the float `exp`,
//! `sqrt`, `sin`, `cos`, `log`, `tanh`, `sigmoid`, `gelu`, `gelu_tanh`, `pow`; the six
//! comparisons of two tensors and with a scalar; `where_`; `matmul` (2-d, batched, shared
//! rhs); `sum`, `max`, `min`, `mean`; `sum_dim`, `mean_dim`, `max_dim`, `min_dim`,
//! `argmax`, `argmin`, with and without `keepdim`; `softmax`, `log_softmax`;
//! `cross_entropy` (i32 and i64 targets); `one_hot` (i32 and i64 indices, into all 7
//! types); `index_select` (i32 and i64 indices); `narrow`, `select`, `chunk`, `cat`,
//! `concat`, `cat_dim`, `concat_dim`, `stack` (also of no parts); `reshape`, `t`,
//! `transpose`, `unsqueeze`, `squeeze`; `to_dtype` between all 49 pairs of types; `to`,
//! `to_dyn`, `into_dyn`, `try_into_device`, `pin_memory`, `detach`, `item`, `to_vec`,
//! `to_ndarray`, `from_ndarray`, `as_slice`, `as_mut_slice`, `as_ndarray`, `Debug`; and
//! `scatter`, `scatter_sizes`, `gather`, `broadcast`, `all_reduce_sum`, `all_gather`.
//! Two-tensor ops on `Dyn` operands of two devices must fail. Not here: autograd
//! (`backward`, `grad`), the stream copies (`to_async`, `to_pinned_async`), the static
//! `rand`/`randn` and `rand_current`/`randn_current` (thin forms of `rand_on`).
//!
//! The reference follows PyTorch except where locus documents otherwise, or differs
//! knowingly (each a known difference, not a failure here):
//! * no negative dims, and `reshape` takes no -1;
//! * `matmul` takes `[m, k] x [k, n]`, `[b, m, k] x [b, k, n]` and `[b, m, k] x [k, n]`
//!   only: no 1-d operands, no more batch dims, no broadcasting of the batch dim;
//! * `t` needs 2 dims (PyTorch returns a 0-d or 1-d tensor as it is);
//! * `chunk` of 0 rows gives no chunks (PyTorch gives `n` empty ones);
//! * a 0-d tensor takes dim 0 in `softmax` and `squeeze`, as in PyTorch, but not in
//!   `sum_dim`, `mean_dim`, `max_dim`, `min_dim`, `argmax`, `argmin`, `transpose` or
//!   `index_select`, which PyTorch allows (a known issue: an `Err`, never a panic);
//! * `argmax`, `argmin`, `max_dim` and `min_dim` need 1 to `i32::MAX` elements in the
//!   dim, and `index_select` and `cross_entropy` refuse an index past `i32::MAX` (the
//!   backends read i32 indices); their indices and targets are 1-d;
//! * `cat` takes no PyTorch-legacy `[0]` part beside others of another rank;
//! * `one_hot` of indices compares them with a `0..classes` row it makes first, so a
//!   result too large for memory (its dims fit) fails only after that row (up to 8 GiB):
//!   such calls are not asked for.
//!
//! What it found (each with a focused test above): `one_hot` of no index built the
//! `0..classes` row (8 GiB and 20 s for `i32::MAX` classes) for an empty result;
//! `index_select` along an empty dim allocated the result (16 GiB of `[2, 2^33]` for a
//! `[0, 2^33]` u8 tensor, 20 s on pinned memory) before finding its indices out of range;
//! and `s op tensor` (scalar on the left) did not exist for i64.
//!
//! Cases: 240 by default (`PROPTEST_CASES` sets it), each on 7 element types and 3
//! placements: about 600,000 op calls, 15 to 25 s in a debug build on two cores (the
//! whole file too). It prints the counts, per op and element type how many calls
//! succeeded, failed and were not asked, and the slowest ops.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::{Add, Div, Mul, Sub};
use std::panic::{catch_unwind, AssertUnwindSafe};

use locus::parallel::{all_gather, all_reduce_sum, broadcast, chunk_sizes, gather, scatter, scatter_sizes};
use locus::{
    bf16, f16, Cpu, Cuda, DType, Dataset, Device, DeviceId, Dyn, Element, Error, Float, HostPlacement, IndexElement,
    Loader, Pinned, SamePlacement, StaticDevice, Tensor,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

/// The error of `r`, which must name `op` first; its message.
fn err_naming<T: std::fmt::Debug>(r: locus::Result<T>, op: &str) -> String {
    let msg = r.expect_err("expected an error").to_string();
    assert!(msg.starts_with(&format!("{op}: ")), "`{msg}` does not name `{op}`");
    msg
}

#[test]
fn matmul_of_empty_operands_whose_result_overflows_is_an_error() {
    fn check<D: StaticDevice>() {
        let a = Tensor::<D>::zeros([1 << 33, 0]).unwrap();
        let b = Tensor::<D>::zeros([0, 1 << 33]).unwrap();
        let msg = err_naming(a.matmul(&b), "matmul");
        assert!(msg.contains("[8589934592, 0]") && msg.contains("[0, 8589934592]"), "{msg}");
        assert!(msg.contains("[8589934592, 8589934592]"), "{msg}");
    }
    check::<Cpu>();
    check::<Cuda<0>>();
}

/// The issue's tensor: no elements, but dims whose product without the zero overflows.
fn issue_tensor() -> locus::Result<Tensor<Cpu>> {
    Tensor::<Cpu>::zeros([0])?.reshape([0, usize::MAX, 2])
}

const ISSUE_SHAPE: &str = "[0, 18446744073709551615, 2]";

#[test]
fn sum_dim_of_an_empty_tensor_with_overflowing_dims_is_an_error() {
    let msg = err_naming(issue_tensor().and_then(|t| t.sum_dim(0, false)), "reshape");
    assert!(msg.contains(ISSUE_SHAPE), "{msg}");
}

#[test]
fn chunk_of_an_empty_tensor_with_overflowing_dims_is_an_error() {
    let msg = err_naming(issue_tensor().and_then(|t| t.chunk(2)), "reshape");
    assert!(msg.contains(ISSUE_SHAPE), "{msg}");
}

#[test]
fn broadcasting_an_empty_tensor_with_overflowing_dims_is_an_error() {
    let two = Tensor::<Cpu>::zeros([2]).unwrap();
    let msg = err_naming(issue_tensor().and_then(|t| &t + &two), "reshape");
    assert!(msg.contains(ISSUE_SHAPE), "{msg}");
}

#[test]
fn dims_that_overflow_are_refused_wherever_the_zero_is() {
    for shape in [[0, usize::MAX, 2], [usize::MAX, 2, 0], [2, 0, usize::MAX]] {
        let msg = err_naming(Tensor::<Cuda<0>>::zeros(shape), "zeros");
        assert!(msg.contains(&format!("{shape:?}")), "{msg}");
        err_naming(Tensor::<Cpu, u8>::zeros([0]).unwrap().reshape(shape), "reshape");
    }
    // The largest empty shapes that fit: the nonzero dims span isize::MAX bytes.
    let edge = Tensor::<Cpu, u8>::zeros([0, isize::MAX as usize]).unwrap();
    assert_eq!(edge.numel(), 0);
    assert!(Tensor::<Cpu, u8>::zeros([0, isize::MAX as usize + 1]).is_err());
    assert!(Tensor::<Cpu>::zeros([0, isize::MAX as usize / 4 + 1]).is_err());
    // Their ops work or fail cleanly: the chunks of no rows, a sum of isize::MAX bytes.
    assert!(edge.chunk(2).unwrap().is_empty());
    assert_eq!((&edge + &Tensor::<Cpu, u8>::ones([1]).unwrap()).unwrap().shape(), edge.shape());
    assert_eq!(edge.sum_dim(1, false).unwrap().shape(), &[0]);
    assert!(matches!(edge.sum_dim(0, false), Err(Error::OutOfMemory { device: DeviceId::Cpu, .. })));
    assert_eq!(edge.t().unwrap().shape(), &[isize::MAX as usize, 0]);
    assert_eq!(edge.transpose(1, 0).unwrap().shape(), &[isize::MAX as usize, 0]);
}

#[test]
fn cat_whose_row_count_overflows_is_an_error() {
    let big = Tensor::<Cpu, u8>::zeros([isize::MAX as usize, 0]).unwrap();
    let msg = err_naming(Tensor::concat(&[&big, &big, &big]), "cat");
    assert!(msg.contains("[9223372036854775807, 0]"), "{msg}");
    // The rows of two fit in usize, but the result's dims do not fit in memory.
    err_naming(big.cat(&big), "cat");
}

/// Whether the kernel hands out any mapping asked for (`vm.overcommit_memory = 1`): then
/// only the address space refuses a size, and a merely huge buffer is faulted in until
/// the OOM killer ends the process.
fn overcommit_always() -> bool {
    std::fs::read_to_string("/proc/sys/vm/overcommit_memory").is_ok_and(|m| m.trim() == "1")
}

#[test]
fn host_tensors_larger_than_memory_are_out_of_memory_not_an_abort() {
    let oom = |r: locus::Result<Tensor<Cpu>>| matches!(r, Err(Error::OutOfMemory { device: DeviceId::Cpu, .. }));
    // 256 TiB: more than any address space holds, so refused on every system.
    assert!(oom(Tensor::<Cpu>::zeros([1 << 46])));
    assert!(matches!(Tensor::<Pinned>::zeros([1 << 46]), Err(Error::OutOfMemory { device: DeviceId::Pinned, .. })));
    let (col, row) = (Tensor::<Cpu, u8>::ones([1 << 24, 1]).unwrap(), Tensor::<Cpu, u8>::ones([1, 1 << 24]).unwrap());
    assert!(matches!(&col + &row, Err(Error::OutOfMemory { .. })));
    // 4 TiB: more than the machine has, which the system refuses unless it overcommits.
    if overcommit_always() {
        eprintln!("note: vm.overcommit_memory = 1: not asking for 4 TiB of host memory");
    } else {
        assert!(oom(Tensor::<Cpu>::zeros([1 << 40])));
    }
    // Past isize::MAX bytes: the shape itself is refused, naming the op.
    let msg = err_naming(Tensor::<Cpu>::zeros([1 << 62]), "zeros");
    assert!(msg.contains("[4611686018427387904]"), "{msg}");
}

/// `f`'s result, or a failure if it runs for more than ten seconds.
fn finishes<R: Send + 'static>(what: &str, f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(f()));
    rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap_or_else(|_| panic!("{what} hung"))
}

// An empty result of huge dims is made without walking them.

#[test]
fn sum_dim_with_an_empty_result_returns_at_once() {
    let t = Tensor::<Cpu, u8>::zeros([1 << 40, 3, 0]).unwrap();
    let r = finishes("sum_dim", move || t.sum_dim(1, false).map(|s| s.shape().to_vec()));
    assert_eq!(r.unwrap(), vec![1 << 40, 0]);
}

#[test]
fn matmul_with_an_empty_result_returns_at_once() {
    let (a, b) = (Tensor::<Cpu, u8>::zeros([1 << 40, 0]).unwrap(), Tensor::<Cpu, u8>::zeros([0, 0]).unwrap());
    let r = finishes("matmul", move || a.matmul(&b).map(|m| m.shape().to_vec()));
    assert_eq!(r.unwrap(), vec![1 << 40, 0]);
}

#[test]
fn transpose_with_an_empty_result_returns_at_once() {
    let t = Tensor::<Cuda<0>, u8>::zeros([1 << 40, 0]).unwrap();
    let u = t.clone();
    let r = finishes("t", move || t.t().map(|m| m.shape().to_vec()));
    assert_eq!(r.unwrap(), vec![0, 1 << 40]);
    let r =
        finishes("transpose", move || u.reshape([1 << 20, 0, 1 << 20])?.transpose(0, 2).map(|m| m.shape().to_vec()));
    assert_eq!(r.unwrap(), vec![1 << 20, 0, 1 << 20]);
}

#[test]
fn chunking_into_more_tensors_than_memory_holds_is_an_error() {
    let rows = Tensor::<Cpu, u8>::zeros([isize::MAX as usize, 0]).unwrap();
    let r = finishes("chunk", move || rows.chunk(usize::MAX).map(|p| p.len()));
    let msg = err_naming(r, "chunk");
    assert!(msg.contains("9223372036854775807 tensors"), "{msg}");
    // A few chunks of many empty rows are fine.
    let few = Tensor::<Cpu, u8>::zeros([1 << 40, 0]).unwrap().chunk(3).unwrap();
    let step = (1usize << 40).div_ceil(3);
    assert_eq!(few.iter().map(|p| p.shape()[0]).collect::<Vec<_>>(), vec![step, step, (1 << 40) - 2 * step]);
}

/// Samples of a shape too large to exist.
struct HugeSamples;

impl Dataset for HugeSamples {
    type Elem = f32;
    fn len(&self) -> usize {
        1
    }
    fn sample_shape(&self) -> Vec<usize> {
        vec![usize::MAX, 2]
    }
    fn get(&self, _index: usize, _out: &mut [f32]) -> locus::Result<()> {
        Ok(())
    }
}

#[test]
fn a_dataset_whose_samples_overflow_is_an_error() {
    let msg = err_naming(Loader::from_dataset(HugeSamples, 1, None).map(|_| ()), "Loader");
    assert!(msg.contains("[18446744073709551615, 2]"), "{msg}");
}

// What the property found (issue 38).

#[test]
fn one_hot_of_no_indices_returns_at_once_whatever_the_class_count() {
    // It built the `0..num_classes` row first: 8 GiB of i32 and 20 s here.
    let none = Tensor::<Cpu, i32>::zeros([2, 0]).unwrap();
    let r = finishes("one_hot", move || none.one_hot::<f32>(i32::MAX as usize).map(|t| t.shape().to_vec()));
    assert_eq!(r.unwrap(), vec![2, 0, i32::MAX as usize]);
    let none = Tensor::<Cuda<0>, i64>::zeros([0]).unwrap();
    let r = finishes("one_hot", move || none.one_hot::<u8>(i32::MAX as usize).map(|t| t.shape().to_vec()));
    assert_eq!(r.unwrap(), vec![0, i32::MAX as usize]);
    // Empty, and still too large to exist.
    let wide = Tensor::<Cpu, i64>::zeros([0, 1 << 40]).unwrap();
    let msg = err_naming(wide.one_hot::<f64>(1 << 30), "one_hot");
    assert!(msg.contains("[0, 1099511627776, 1073741824]"), "{msg}");
    assert!(wide.one_hot::<f32>(1 << 31).is_err());
}

#[test]
fn index_select_along_an_empty_dim_fails_before_making_the_result() {
    // The result, [2, 2^33] bytes, was allocated before the indices were checked: 20 s
    // on pinned memory, and an out-of-memory error instead of the index's elsewhere.
    fn check<D: StaticDevice + locus::SamePlacement<D>>() {
        let t = Tensor::<D, u8>::zeros([0, 1 << 33]).unwrap();
        let index = Tensor::<D, i32>::from_vec(vec![-1, 0], [2]).unwrap();
        let r = finishes("index_select", move || t.index_select(0, &index).map(|t| t.shape().to_vec()));
        let msg = err_naming(r, "index_select");
        assert!(msg.contains("index -1 (at position 0) is out of range for dim 0 of size 0"), "{msg}");
        // No index picks nothing, along an empty dim too.
        let t = Tensor::<D, u8>::zeros([0, 1 << 33]).unwrap();
        let none = Tensor::<D, i32>::zeros([0]).unwrap();
        assert_eq!(t.index_select(0, &none).unwrap().shape(), &[0, 1 << 33]);
    }
    check::<Pinned>();
    check::<Cpu>();
    check::<Cuda<0>>();
}

#[test]
fn a_scalar_on_the_left_takes_every_element_type() {
    // `s op tensor` existed for every type but i64.
    let x = Tensor::<Cpu, i64>::from_vec(vec![2, -3], [2]).unwrap();
    assert_eq!((12 / &x).unwrap().to_vec().unwrap(), vec![6, -4]);
    assert_eq!((1 - x.clone()).unwrap().to_vec().unwrap(), vec![-1, 4]);
    assert_eq!((3 * &x).unwrap().shape(), &[2]);
    assert_eq!((i64::MAX + &x).unwrap().to_vec().unwrap()[0], i64::MIN + 1);
    assert!((1 / &Tensor::<Cuda<0>, i64>::zeros([1]).unwrap()).is_err());
}

// The property test.

/// Bytes of one result the fuzz lets be allocated for real.
const BUDGET: u128 = 1 << 18;
/// Bytes beyond any address space (256 TiB): asking for a result this large fails on
/// every system, whatever its overcommit policy, before anything is touched.
const REFUSED: u128 = 1 << 48;

/// What asking for a result of some shape must do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Size {
    /// Small or empty: it may be made.
    Fits,
    /// Large but possible: the fuzz does not ask.
    Skip,
    /// Too large to exist, or for any memory: it must be an error.
    Refused,
}

/// Classifies a shape of `elem`-byte elements (dims as u128, so that a sum of dims cannot
/// overflow here).
fn size(dims: &[u128], elem: usize) -> Size {
    let span = dims.iter().fold(elem as u128, |a, &d| a.saturating_mul(d.max(1)));
    if overflows(dims, elem) {
        Size::Refused
    } else if dims.contains(&0) || span <= BUDGET {
        Size::Fits
    } else if span >= REFUSED {
        Size::Refused
    } else {
        Size::Skip
    }
}

/// Whether dims cannot be a tensor's at all: they, a 0 counted as 1, span more than
/// `isize::MAX` bytes of `elem`-byte elements.
fn overflows(dims: &[u128], elem: usize) -> bool {
    let span = dims.iter().fold(elem as u128, |a, &d| a.saturating_mul(d.max(1)));
    span > isize::MAX as u128 || dims.iter().any(|&d| d > usize::MAX as u128)
}

/// The reference: the dims of each op's result under PyTorch's rules (as locus documents
/// them), or `None` where the input is invalid. Dims are `u128`, so that sums and products
/// of huge dims cannot overflow here; whether a result that follows the rules can exist is
/// [`size`]'s question.
mod rule {
    pub type Dims = Vec<u128>;

    pub fn wide(s: &[usize]) -> Dims {
        s.iter().map(|&d| d as u128).collect()
    }

    /// The element count (saturating: it is only compared with counts that exist).
    pub fn numel(s: &[usize]) -> u128 {
        s.iter().fold(1u128, |n, &d| n.saturating_mul(d as u128))
    }

    /// NumPy broadcasting: the shapes right-aligned, each dim equal to the others or 1.
    pub fn broadcast(shapes: &[&[usize]]) -> Option<Dims> {
        let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
        (0..rank)
            .map(|i| {
                let mut out = 1;
                for s in shapes {
                    let d = if i + s.len() < rank { 1 } else { s[i + s.len() - rank] };
                    if d != 1 {
                        if out != 1 && out != d {
                            return None;
                        }
                        out = d;
                    }
                }
                Some(out as u128)
            })
            .collect()
    }

    /// `[m, k] x [k, n]`, `[b, m, k] x [b, k, n]` and `[b, m, k] x [k, n]`.
    pub fn matmul(a: &[usize], b: &[usize]) -> Option<Dims> {
        match (a, b) {
            (&[m, k], &[k2, n]) if k == k2 => Some(wide(&[m, n])),
            (&[bt, m, k], &[b2, k2, n]) if k == k2 && bt == b2 => Some(wide(&[bt, m, n])),
            (&[bt, m, k], &[k2, n]) if k == k2 => Some(wide(&[bt, m, n])),
            _ => None,
        }
    }

    /// A reduction over `dim`: the dim removed, or 1 with `keepdim`.
    pub fn reduced(a: &[usize], dim: usize, keepdim: bool) -> Option<Dims> {
        (dim < a.len()).then(|| {
            let mut s = wide(a);
            if keepdim {
                s[dim] = 1;
            } else {
                s.remove(dim);
            }
            s
        })
    }

    /// `argmax` and kin: a reduction over a dim of 1 to `i32::MAX` elements.
    pub fn arg_reduced(a: &[usize], dim: usize, keepdim: bool) -> Option<Dims> {
        reduced(a, dim, keepdim).filter(|_| (1..=i32::MAX as usize).contains(&a[dim]))
    }

    /// `softmax` keeps the shape; a 0-d tensor takes dim 0.
    pub fn softmax(a: &[usize], dim: usize) -> Option<Dims> {
        (dim < a.len() || (a.is_empty() && dim == 0)).then(|| wide(a))
    }

    pub fn t(a: &[usize]) -> Option<Dims> {
        (a.len() == 2).then(|| wide(&[a[1], a[0]]))
    }

    pub fn transpose(a: &[usize], d0: usize, d1: usize) -> Option<Dims> {
        (d0 < a.len() && d1 < a.len()).then(|| {
            let mut s = wide(a);
            s.swap(d0, d1);
            s
        })
    }

    /// `squeeze(dim)` drops a dim of 1 and keeps any other; a 0-d tensor takes dim 0.
    pub fn squeeze(a: &[usize], dim: usize) -> Option<Dims> {
        if a.is_empty() && dim == 0 {
            return Some(Vec::new());
        }
        (dim < a.len()).then(|| {
            let mut s = wide(a);
            if a[dim] == 1 {
                s.remove(dim);
            }
            s
        })
    }

    pub fn unsqueeze(a: &[usize], dim: usize) -> Option<Dims> {
        (dim <= a.len()).then(|| {
            let mut s = wide(a);
            s.insert(dim, 1);
            s
        })
    }

    pub fn narrow(a: &[usize], dim: usize, start: usize, len: usize) -> Option<Dims> {
        (dim < a.len() && start.checked_add(len).is_some_and(|end| end <= a[dim])).then(|| {
            let mut s = wide(a);
            s[dim] = len as u128;
            s
        })
    }

    pub fn select(a: &[usize], dim: usize, index: usize) -> Option<Dims> {
        narrow(a, dim, index, 1).map(|mut s| {
            s.remove(dim);
            s
        })
    }

    /// `cat` along `dim`: a list of one or more, of one rank, equal but in `dim`.
    pub fn cat(parts: &[&[usize]], dim: usize) -> Option<Dims> {
        let first = parts.first()?;
        let fits = |p: &&[usize]| {
            p.len() == first.len() && p.iter().zip(first.iter()).enumerate().all(|(d, (x, y))| d == dim || x == y)
        };
        if dim >= first.len() || !parts.iter().all(fits) {
            return None;
        }
        let mut s = wide(first);
        s[dim] = parts.iter().map(|p| p[dim] as u128).sum();
        Some(s)
    }

    /// `stack` along a new `dim` (`0..=rank`): a list of one or more of one shape.
    pub fn stack(parts: &[&[usize]], dim: usize) -> Option<Dims> {
        let first = parts.first()?;
        (dim <= first.len() && parts.iter().all(|p| p == first)).then(|| {
            let mut s = wide(first);
            s.insert(dim, parts.len() as u128);
            s
        })
    }

    pub fn reshape(a: &[usize], to: &[usize]) -> Option<Dims> {
        (numel(a) == numel(to)).then(|| wide(to))
    }

    /// `chunk(n)`: `(parts, step, rows)`, `parts` pieces of `step` rows but the last (of
    /// `rows` in all); a 0-d tensor or `n == 0` is invalid.
    pub fn chunk(a: &[usize], n: usize) -> Option<(usize, usize, usize)> {
        let (&rows, _) = a.split_first()?;
        if n == 0 {
            return None;
        }
        let step = rows.div_ceil(n).max(1);
        Some((rows.div_ceil(step), step, rows))
    }

    /// The pieces `scatter` gives: dim 0 split by `sizes`, which must add up to it.
    pub fn split(a: &[usize], sizes: &[usize], devices: usize) -> Option<Vec<Dims>> {
        let (&rows, _) = a.split_first()?;
        let total: u128 = sizes.iter().map(|&s| s as u128).sum();
        (sizes.len() == devices && total == rows as u128).then(|| {
            sizes
                .iter()
                .map(|&s| {
                    let mut d = wide(a);
                    d[0] = s as u128;
                    d
                })
                .collect()
        })
    }

    fn in_range(values: &[i64], bound: usize) -> bool {
        values.iter().all(|&v| v >= 0 && (v as u128) < bound as u128)
    }

    /// The backends read `i32` indices: an index past `i32::MAX` is refused even where the
    /// dim is longer (as locus documents).
    fn indexable(values: &[i64], bound: usize) -> bool {
        in_range(values, bound) && values.iter().all(|&v| v <= i32::MAX.into())
    }

    /// `index_select(dim, index)`: a 1-d index of values in `[0, size of dim)`.
    pub fn index_select(a: &[usize], dim: usize, index: &[usize], values: &[i64]) -> Option<Dims> {
        (dim < a.len() && index.len() == 1 && indexable(values, a[dim])).then(|| {
            let mut s = wide(a);
            s[dim] = index[0] as u128;
            s
        })
    }

    /// `one_hot(classes)`: at most `i32::MAX` classes, every index in `[0, classes)`.
    pub fn one_hot(index: &[usize], values: &[i64], classes: usize) -> Option<Dims> {
        (classes <= i32::MAX as usize && in_range(values, classes)).then(|| {
            let mut s = wide(index);
            s.push(classes as u128);
            s
        })
    }

    /// `cross_entropy`: logits `[n, c]`, targets `[n]` in `[0, c)`; a 0-d mean.
    pub fn cross_entropy(logits: &[usize], targets: &[usize], values: &[i64]) -> Option<Dims> {
        match (logits, targets) {
            (&[n, c], &[m]) if n == m && indexable(values, c) => Some(Vec::new()),
            _ => None,
        }
    }

    /// `arange(start, end, step)`, computed in f64: `ceil((end - start) / step)` values; a
    /// zero, non-finite or backward step is invalid, and so is an i64 range past ±2^52.
    pub fn arange(start: f64, end: f64, step: f64, i64_range: bool) -> Option<Dims> {
        let finite = start.is_finite() && end.is_finite() && step.is_finite();
        if step == 0.0 || !finite || (end - start) * step < 0.0 {
            return None;
        }
        let exact = (1u64 << 52) as f64;
        if i64_range && (start.abs() > exact || end.abs() > exact) {
            return None;
        }
        let n = ((end - start) / step).ceil();
        (n <= usize::MAX as f64 / 2.0).then(|| vec![n as u128])
    }
}

use rule::{wide, Dims};

/// What the reference says one call must give.
#[derive(Clone, Debug)]
enum Want {
    /// An error: the input is invalid.
    Err,
    /// Results of these dims and element types.
    Out(Vec<(Dims, DType)>),
    /// Not asked for: the call would make something large but possible (see its caller).
    Skip,
}

impl Want {
    fn of(dims: Option<Dims>, dtype: DType) -> Self {
        dims.map_or(Want::Err, |d| Want::Out(vec![(d, dtype)]))
    }

    fn class(&self) -> Size {
        match self {
            Want::Err => Size::Fits,
            Want::Skip => Size::Skip,
            Want::Out(v) => v.iter().map(|(d, t)| size(d, t.size())).max().unwrap_or(Size::Fits),
        }
    }
}

/// One result as a call gives it: dims, and for a tensor its element type and device.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    dims: Vec<usize>,
    dtype: Option<DType>,
    device: Option<DeviceId>,
}

/// The results a call gave, in order.
trait Observe {
    fn observe(&self, out: &mut Vec<Seen>);
}

impl<D: Device, T: Element> Observe for Tensor<D, T> {
    fn observe(&self, out: &mut Vec<Seen>) {
        out.push(Seen { dims: self.shape().to_vec(), dtype: Some(T::DTYPE), device: Some(self.device()) });
    }
}

impl<A: Observe, B: Observe> Observe for (A, B) {
    fn observe(&self, out: &mut Vec<Seen>) {
        self.0.observe(out);
        self.1.observe(out);
    }
}

impl<A: Observe> Observe for Vec<A> {
    fn observe(&self, out: &mut Vec<Seen>) {
        self.iter().for_each(|a| a.observe(out));
    }
}

/// A value on the host (a `Vec`, an element, an array) by its dims.
struct Host(Vec<usize>);

impl Observe for Host {
    fn observe(&self, out: &mut Vec<Seen>) {
        out.push(Seen { dims: self.0.clone(), dtype: None, device: None });
    }
}

/// What one call gave, as the placements are compared.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Ok(Vec<Vec<usize>>),
    Err,
    NotAsked,
}

/// Counts and logs what the fuzz ran.
#[derive(Default)]
struct Fuzz {
    calls: usize,
    skipped: usize,
    /// What each call of this placement gave, in order.
    log: Vec<(String, Outcome)>,
    /// Whether calls are logged (not for the ops of one placement only).
    logging: bool,
    /// The placement and element type now driven, for messages and the tally.
    place: String,
    dtype: &'static str,
    /// Per op and element type: calls that succeeded, failed, were not asked.
    tally: BTreeMap<(String, &'static str), [usize; 3]>,
    /// Per op: the time its calls took.
    time: BTreeMap<String, std::time::Duration>,
}

fn message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

fn fail<T>(msg: String) -> Result<T, TestCaseError> {
    Err(TestCaseError::fail(msg))
}

impl Fuzz {
    /// Runs `f` unless the reference's result is large but possible, and holds what it
    /// gives to `want`; the results on `device` where given. `None` when it failed or was
    /// not asked for. (A thin generic shell: the checking is [`Fuzz::check_erased`], compiled
    /// once rather than once per call site, dtype and placement.)
    fn check<R: Observe>(
        &mut self,
        op: &str,
        want: Want,
        device: Option<DeviceId>,
        f: impl FnOnce() -> locus::Result<R>,
    ) -> Result<Option<R>, TestCaseError> {
        let (mut f, mut kept) = (Some(f), None);
        let keep = self.check_erased(op, want, device, &mut |seen| {
            let r = f.take().expect("an op runs once")()?;
            r.observe(seen);
            kept = Some(r);
            Ok(())
        })?;
        Ok(if keep { kept } else { None })
    }

    /// [`Fuzz::check`] with the op's type erased: `f` runs the op and observes what it
    /// gave. Whether the result is kept.
    fn check_erased(
        &mut self,
        op: &str,
        want: Want,
        device: Option<DeviceId>,
        f: &mut dyn FnMut(&mut Vec<Seen>) -> locus::Result<()>,
    ) -> Result<bool, TestCaseError> {
        let class = want.class();
        let what = format!("{op} of {} on {}", self.dtype, self.place);
        let (outcome, keep) = if class == Size::Skip {
            self.skipped += 1;
            (Outcome::NotAsked, false)
        } else {
            self.calls += 1;
            watchdog::entering(&what, &format!("{want:?}"));
            let started = std::time::Instant::now();
            let mut seen = Vec::new();
            let r = catch_unwind(AssertUnwindSafe(|| f(&mut seen)));
            *self.time.entry(op.to_string()).or_default() += started.elapsed();
            let r = match r {
                Ok(r) => r,
                Err(p) => return fail(format!("{what} panicked (expected {want:?}): {}", message(p))),
            };
            match (r, &want) {
                (Ok(()), Want::Out(out)) if class == Size::Fits => {
                    let same = seen.len() == out.len()
                        && seen.iter().zip(out).all(|(s, (dims, dtype))| {
                            wide(&s.dims) == *dims
                                && s.dtype.is_none_or(|t| t == *dtype)
                                && s.device.zip(device).is_none_or(|(a, b)| a == b)
                        });
                    if !same {
                        return fail(format!("{what}: expected {out:?} on {device:?}, got {seen:?}"));
                    }
                    (Outcome::Ok(seen.into_iter().map(|s| s.dims).collect()), true)
                }
                (Ok(()), Want::Out(out)) => {
                    return fail(format!("{what} succeeded, but its result {out:?} cannot exist"))
                }
                (Ok(()), _) => return fail(format!("{what} succeeded on invalid input")),
                (Err(e), Want::Out(out)) if class == Size::Fits => {
                    return fail(format!("{what} failed on valid input (expected {out:?}): {e}"))
                }
                (Err(_), _) => (Outcome::Err, false),
            }
        };
        let n = match outcome {
            Outcome::Ok(_) => 0,
            Outcome::Err => 1,
            Outcome::NotAsked => 2,
        };
        self.tally.entry((op.to_string(), self.dtype)).or_default()[n] += 1;
        if self.logging {
            self.log.push((op.to_string(), outcome));
        }
        Ok(keep)
    }

    /// All of one case's calls on `place`, in `dtype`: what each gave.
    fn run_on<D: Place>(&mut self, place: D, dtype: u8, c: &Case) -> Result<Vec<(String, Outcome)>, TestCaseError> {
        self.log.clear();
        self.logging = true;
        self.place = format!("{}", place.id());
        match dtype {
            0 => floats::<D, f32>(self, place, c)?,
            1 => floats::<D, f64>(self, place, c)?,
            2 => floats::<D, bf16>(self, place, c)?,
            3 => floats::<D, f16>(self, place, c)?,
            4 => ints::<D, i32>(self, place, c)?,
            5 => ints::<D, i64>(self, place, c)?,
            _ => elems::<D, u8>(self, place, c).map(drop)?,
        }
        Ok(std::mem::take(&mut self.log))
    }
}

/// A hang is a failure too: a thread that ends the process when one call runs too long.
mod watchdog {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Mutex, Once};
    use std::time::Duration;

    static CALLS: AtomicUsize = AtomicUsize::new(0);
    static CURRENT: Mutex<String> = Mutex::new(String::new());
    /// Seconds one call may take (debug builds on two slow cores included).
    const LIMIT: u64 = 20;

    /// Notes the call about to run.
    pub fn entering(what: &str, result: &str) {
        static START: Once = Once::new();
        START.call_once(|| {
            std::thread::spawn(|| {
                let mut last = usize::MAX;
                loop {
                    std::thread::sleep(Duration::from_secs(LIMIT));
                    let now = CALLS.load(Ordering::Relaxed);
                    if now == last {
                        let current = CURRENT.lock().unwrap_or_else(|p| p.into_inner());
                        // Straight to stderr: the test harness captures `eprintln!`, and exit
                        // would lose it.
                        let msg = format!("shape fuzz: `{current}` has run for over {LIMIT} s: a hang\n");
                        let _ = std::io::Write::write_all(&mut std::io::stderr(), msg.as_bytes());
                        std::process::exit(101);
                    }
                    last = now;
                }
            });
        });
        *CURRENT.lock().unwrap_or_else(|p| p.into_inner()) = format!("{what}, expecting {result}");
        CALLS.fetch_add(1, Ordering::Relaxed);
    }
}

/// The inputs of one case.
#[derive(Clone, Debug)]
struct Case {
    a: Vec<usize>,
    /// How the other shapes follow from `a` (see [`related`]), and their own dims.
    rel: [u8; 4],
    raw: [Vec<usize>; 4],
    /// How the operands are made (see [`make`]), and the value of their elements.
    makers: [u8; 3],
    fills: [i8; 2],
    /// The dims ops take.
    d0: usize,
    d1: usize,
    keepdim: bool,
    /// `narrow`'s start and length (`select` takes `start`).
    start: usize,
    len: usize,
    /// The count of chunks, of tensors stacked, of classes.
    n: usize,
    /// Draws for index and target values (see [`index_values`]), and the index's rank.
    idx: Vec<u32>,
    idx_kind: u8,
    /// `arange(0, end, step)`.
    end: usize,
    step: i8,
    /// The placement compared with `Cpu` and `Cuda<0>`.
    third: u8,
}

impl Case {
    /// The second operand of elementwise ops, comparisons and `where_`.
    fn b(&self) -> Vec<usize> {
        related(&self.a, self.rel[0], &self.raw[0])
    }

    /// The mask of `where_`.
    fn mask(&self) -> Vec<usize> {
        related(&self.a, self.rel[1], &self.raw[1])
    }

    /// The rhs of `matmul`: mostly `[k, n]` or `[b, k, n]` for `a` = `[.., m, k]`.
    fn rhs(&self) -> Vec<usize> {
        let (raw, pick) = (&self.raw[2], |i: usize| self.raw[2].get(i).copied().unwrap_or(i + 1));
        match (&self.a[..], self.rel[2] % 4) {
            (_, 0) => raw.clone(),
            (&[_, k], _) => vec![k, pick(0)],
            (&[b, _, k], 1) => vec![b, k, pick(0)],
            (&[_, _, k], _) => vec![k, pick(0)],
            _ => raw.clone(),
        }
    }

    /// The second part of `cat_dim` and `concat_dim`: mostly `a` with dim `d` changed.
    fn partner(&self, d: usize) -> Vec<usize> {
        let mut s = self.a.clone();
        match self.rel[2] / 4 % 4 {
            0 => self.raw[2].clone(),
            1 => s,
            _ => {
                if let Some(x) = s.get_mut(d) {
                    *x = self.raw[2].first().copied().unwrap_or(2);
                }
                s
            }
        }
    }

    /// The reshape target: `a` reversed, flattened or with dims of 1 added, an empty
    /// shape with huge dims, or any shape.
    fn target(&self) -> Vec<usize> {
        let (a, raw) = (&self.a, &self.raw[3]);
        match self.rel[3] % 5 {
            0 => a.iter().rev().copied().collect(),
            1 => a.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).map_or_else(|| raw.clone(), |n| vec![n]),
            2 => {
                let mut s = vec![1];
                s.extend_from_slice(a);
                s.push(1);
                s
            }
            3 => {
                let mut s = raw.clone();
                s.push(0);
                s
            }
            _ => raw.clone(),
        }
    }

    /// `narrow`'s start and length for a dim of `size`: mostly within it, else as drawn.
    fn range(&self, size: Option<usize>) -> (usize, usize) {
        match size {
            Some(size) if self.rel[1] / 8 % 4 != 0 => {
                let start = size.checked_add(1).map_or(self.start, |n| self.start % n);
                (start, (size - start).checked_add(1).map_or(self.len, |n| self.len % n))
            }
            _ => (self.start, self.len),
        }
    }

    /// The row counts of `scatter_sizes` over two devices: mostly a split of dim 0.
    fn sizes(&self) -> Vec<usize> {
        match (self.a.first(), self.rel[3] / 8 % 2) {
            (Some(&rows), 0) => vec![rows / 3, rows - rows / 3],
            _ => self.raw[3].clone(),
        }
    }
}

/// A shape related to `a` as `rel` says, so that most pairs of operands fit together:
/// the same, some dims 1 (broadcast), a suffix, one dim changed, a dim more in front, or
/// `raw` as it is.
fn related(a: &[usize], rel: u8, raw: &[usize]) -> Vec<usize> {
    let pick = |i: usize| raw.get(i).copied().unwrap_or(i % 3);
    match rel % 8 {
        0 | 1 => a.to_vec(),
        2 => a.iter().enumerate().map(|(i, &d)| if pick(i) % 2 == 0 { 1 } else { d }).collect(),
        3 => a[pick(0).min(a.len())..].to_vec(),
        4 => {
            let mut s = a.to_vec();
            if !s.is_empty() {
                let i = pick(1) % s.len();
                s[i] = pick(0);
            }
            s
        }
        5 => {
            let mut s = vec![pick(0)];
            s.extend_from_slice(a);
            s
        }
        _ => raw.to_vec(),
    }
}

/// Dims large but feasible, and huge.
fn large_dim() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(64usize),
        Just(4096),
        Just(1 << 20),
        Just(1 << 33),
        Just(1 << 40),
        Just(1 << 60),
        Just(1 << 61),
        Just(isize::MAX as usize / 4 + 1),
        Just(isize::MAX as usize),
        Just(usize::MAX / 2 + 1),
        Just(usize::MAX),
    ]
}

/// A shape: rank 0 to 4, dims 0 to 5; a third of them with one large dim, most often
/// beside a 0.
fn shape() -> impl Strategy<Value = Vec<usize>> {
    let rank = prop_oneof![1 => Just(0usize), 2 => Just(1), 3 => Just(2), 3 => Just(3), 1 => Just(4)];
    (rank, prop::collection::vec(0usize..=5, 4), 0u8..6, any::<prop::sample::Index>(), 1usize..4, large_dim()).prop_map(
        |(rank, mut dims, kind, at, zero_from, large)| {
            dims.truncate(rank);
            if rank > 0 && kind < 2 {
                let i = at.index(rank);
                dims[i] = large;
                if kind == 0 && rank > 1 {
                    dims[(i + zero_from) % rank] = 0;
                }
            }
            dims
        },
    )
}

fn dim() -> impl Strategy<Value = usize> {
    prop_oneof![12 => 0usize..=4, 1 => Just(5), 1 => Just(usize::MAX)]
}

fn count() -> impl Strategy<Value = usize> {
    prop_oneof![
        12 => 0usize..=6,
        1 => Just(i32::MAX as usize),
        1 => Just(1usize << 31),
        1 => Just(usize::MAX),
    ]
}

fn case() -> impl Strategy<Value = Case> {
    (
        (shape(), any::<[u8; 4]>(), [shape(), shape(), shape(), shape()]),
        (any::<[u8; 3]>(), [-1i8..=3, -1i8..=3], dim(), dim(), any::<bool>()),
        (
            prop_oneof![8 => 0usize..=5, 1 => Just(1 << 40), 1 => Just(usize::MAX)],
            prop_oneof![8 => 0usize..=5, 1 => Just(1 << 40), 1 => Just(usize::MAX)],
            count(),
        ),
        (prop::collection::vec(any::<u32>(), 0..=4), any::<u8>()),
        (
            prop_oneof![6 => 0usize..=6, 1 => Just(4096), 1 => Just(1 << 33), 1 => Just(1 << 60), 1 => Just(usize::MAX)],
            prop_oneof![Just(1i8), Just(2), Just(0), Just(-1)],
            0u8..5,
        ),
    )
        .prop_map(
            |(
                (a, rel, raw),
                (makers, fills, d0, d1, keepdim),
                (start, len, n),
                (idx, idx_kind),
                (end, step, third),
            )| Case {
                a,
                rel,
                raw,
                makers,
                fills,
                d0,
                d1,
                keepdim,
                start,
                len,
                n,
                idx,
                idx_kind,
                end,
                step,
                third,
            },
        )
}

/// Index values for a dim of `bound` elements from the case's draws, `len` of them:
/// mostly in range, now and then -1, `bound`, past `i32::MAX` or `i64::MIN`.
fn index_values(raw: &[u32], len: usize, bound: usize) -> Vec<i64> {
    (0..len)
        .map(|i| {
            let r = raw.get(i).copied().unwrap_or(i as u32).wrapping_add(i as u32);
            match r % 40 {
                0 => -1,
                1 => i64::try_from(bound).unwrap_or(i64::MAX),
                2 => 1 << 33,
                3 => i64::MIN,
                _ if bound == 0 => 0,
                _ => (u64::from(r) % bound as u64) as i64,
            }
        })
        .collect()
}

/// An operand and the value of all its elements, if it was made.
type Operand<D, T> = Option<(Tensor<D, T>, T)>;

/// An index tensor, the values it holds and its shape, if it was made.
type Indices<D, I> = Option<(Tensor<D, I>, Vec<i64>, Vec<usize>)>;

/// An index tensor of `values` on `place`: 1-d, or for some `kind`s 0-d (one value) or
/// `[1, n]`; the values it holds (an `i32` one keeps a value past its range as
/// `i32::MIN`, also out of range) and its shape.
fn index_tensor<D: Device, I: IndexElement>(
    fz: &mut Fuzz,
    place: D,
    values: &[i64],
    kind: u8,
) -> Result<Indices<D, I>, TestCaseError> {
    let data: Vec<I> = values
        .iter()
        .map(|&v| if I::DTYPE == DType::I32 && i32::try_from(v).is_err() { i32::MIN.into() } else { v })
        .map(|v| I::from_f64(v as f64))
        .collect();
    let held: Vec<i64> = data.iter().map(|&i| i.to_i64()).collect();
    let shape = match (kind % 4, values.len()) {
        (0, 1) => vec![],
        (1, n) => vec![1, n],
        (_, n) => vec![n],
    };
    let t = fz.check("from_vec", Want::of(Some(wide(&shape)), I::DTYPE), Some(place.id()), || {
        Tensor::<D, I>::from_vec_on(place, data, &shape)
    })?;
    Ok(t.map(|t| (t, held, shape)))
}

/// The element count of `shape` where it is small enough to make from data, else 0.
fn data_len(shape: &[usize], elem: usize) -> usize {
    if size(&wide(shape), elem) == Size::Fits && !shape.contains(&0) {
        shape.iter().product()
    } else {
        0
    }
}

/// An operand of `shape` on `place`, made as `maker` says, and the value of all its
/// elements.
fn make<D: Device, T: Element>(
    fz: &mut Fuzz,
    place: D,
    maker: u8,
    fill: T,
    shape: &[usize],
) -> Result<Operand<D, T>, TestCaseError> {
    let want = Want::of(Some(wide(shape)), T::DTYPE);
    let dev = Some(place.id());
    let len = data_len(shape, T::DTYPE.size());
    Ok(match maker % 6 {
        0 => fz.check("zeros", want, dev, || Tensor::<D, T>::zeros_on(place, shape))?.map(|t| (t, T::ZERO)),
        1 => fz.check("ones", want, dev, || Tensor::<D, T>::ones_on(place, shape))?.map(|t| (t, T::ONE)),
        2 => fz.check("full", want, dev, || Tensor::<D, T>::full_on(place, shape, fill))?.map(|t| (t, fill)),
        3 => {
            let data = vec![fill; len];
            fz.check("from_vec", want, dev, || Tensor::<D, T>::from_vec_on(place, data, shape))?.map(|t| (t, fill))
        }
        4 => {
            let data = vec![fill; len];
            fz.check("from_slice", want, dev, || Tensor::<D, T>::from_slice_on(place, &data, shape))?.map(|t| (t, fill))
        }
        _ => {
            // An empty shape reached by reshaping an empty tensor; others made as zeros.
            let empty = Tensor::<D, T>::zeros_on(place, [0]).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let reshaped = Want::of(rule::reshape(&[0], shape), T::DTYPE);
            match fz.check("reshape", reshaped, dev, || empty.reshape(shape))? {
                Some(t) => Some((t, T::ZERO)),
                None => fz.check("zeros", want, dev, || Tensor::<D, T>::zeros_on(place, shape))?.map(|t| (t, T::ZERO)),
            }
        }
    })
}

type Made<D, T> = locus::Result<Tensor<D, T>>;

/// The scalar operators on both sides, for every element type that has them all.
trait Scalars<D: Device>: Element {
    fn rhs(t: &Tensor<D, Self>, op: char, s: Self) -> Made<D, Self>;
    fn lhs(s: Self, op: char, t: &Tensor<D, Self>) -> Made<D, Self>;
}

impl<D: Device, T: Element> Scalars<D> for T
where
    for<'a> &'a Tensor<D, T>: Add<T, Output = Made<D, T>>
        + Sub<T, Output = Made<D, T>>
        + Mul<T, Output = Made<D, T>>
        + Div<T, Output = Made<D, T>>,
    for<'a> T: Add<&'a Tensor<D, T>, Output = Made<D, T>>
        + Sub<&'a Tensor<D, T>, Output = Made<D, T>>
        + Mul<&'a Tensor<D, T>, Output = Made<D, T>>
        + Div<&'a Tensor<D, T>, Output = Made<D, T>>,
{
    fn rhs(t: &Tensor<D, T>, op: char, s: T) -> Made<D, T> {
        match op {
            '+' => t + s,
            '-' => t - s,
            '*' => t * s,
            _ => t / s,
        }
    }

    fn lhs(s: T, op: char, t: &Tensor<D, T>) -> Made<D, T> {
        match op {
            '+' => s + t,
            '-' => s - t,
            '*' => s * t,
            _ => s / t,
        }
    }
}

/// A placement the fuzz runs on, with the ops that it alone has.
trait Place: Device + SamePlacement<Self> {
    /// Runs the ops of this placement only on `shape` (and `a`, of that shape, if made).
    fn own_ops<T: Element>(fz: &mut Fuzz, shape: &[usize], a: Option<&Tensor<Self, T>>) -> Result<(), TestCaseError>;
}

impl Place for Cpu {
    fn own_ops<T: Element>(fz: &mut Fuzz, shape: &[usize], a: Option<&Tensor<Self, T>>) -> Result<(), TestCaseError> {
        statics::<Cpu, T>(fz, shape)?;
        if let Some(a) = a {
            host_views(fz, a)?;
            let want = Want::of(Some(wide(shape)), T::DTYPE);
            fz.check("pin_memory", want, Some(DeviceId::Pinned), || a.pin_memory())?;
        }
        Ok(())
    }
}

impl Place for Pinned {
    fn own_ops<T: Element>(fz: &mut Fuzz, shape: &[usize], a: Option<&Tensor<Self, T>>) -> Result<(), TestCaseError> {
        statics::<Pinned, T>(fz, shape)?;
        a.map_or(Ok(()), |a| host_views(fz, a))
    }
}

impl<const N: usize> Place for Cuda<N>
where
    Cuda<N>: StaticDevice + SamePlacement<Cuda<N>>,
{
    fn own_ops<T: Element>(fz: &mut Fuzz, shape: &[usize], _: Option<&Tensor<Self, T>>) -> Result<(), TestCaseError> {
        statics::<Cuda<N>, T>(fz, shape)
    }
}

impl Place for Dyn {
    fn own_ops<T: Element>(fz: &mut Fuzz, shape: &[usize], _: Option<&Tensor<Self, T>>) -> Result<(), TestCaseError> {
        // The current device is the host's.
        let (want, dev) = (Want::of(Some(wide(shape)), T::DTYPE), Some(DeviceId::Cpu));
        let len = data_len(shape, T::DTYPE.size());
        fz.check("zeros_current", want.clone(), dev, || Tensor::<Dyn, T>::zeros_current(shape))?;
        fz.check("ones_current", want.clone(), dev, || Tensor::<Dyn, T>::ones_current(shape))?;
        fz.check("full_current", want.clone(), dev, || Tensor::<Dyn, T>::full_current(shape, T::ONE))?;
        fz.check("from_vec_current", want.clone(), dev, || {
            Tensor::<Dyn, T>::from_vec_current(vec![T::ONE; len], shape)
        })?;
        fz.check("from_slice_current", want, dev, || Tensor::<Dyn, T>::from_slice_current(&vec![T::ONE; len], shape))?;
        let three = Want::of(Some(vec![3]), T::DTYPE);
        fz.check("arange_current", three, dev, || Tensor::<Dyn, T>::arange_current(T::ZERO, T::from_f64(3.0), T::ONE))?;
        Ok(())
    }
}

/// The factories of a static placement.
fn statics<D: StaticDevice, T: Element>(fz: &mut Fuzz, shape: &[usize]) -> Result<(), TestCaseError> {
    let (want, dev) = (Want::of(Some(wide(shape)), T::DTYPE), D::resolve().ok().map(|d| d.id()));
    let len = data_len(shape, T::DTYPE.size());
    fz.check("zeros (static)", want.clone(), dev, || Tensor::<D, T>::zeros(shape))?;
    fz.check("ones (static)", want.clone(), dev, || Tensor::<D, T>::ones(shape))?;
    fz.check("full (static)", want.clone(), dev, || Tensor::<D, T>::full(shape, T::ONE))?;
    fz.check("from_vec (static)", want.clone(), dev, || Tensor::<D, T>::from_vec(vec![T::ONE; len], shape))?;
    fz.check("from_slice (static)", want, dev, || Tensor::<D, T>::from_slice(&vec![T::ONE; len], shape))?;
    let three = Want::of(Some(vec![3]), T::DTYPE);
    fz.check("arange (static)", three, dev, || Tensor::<D, T>::arange(T::ZERO, T::from_f64(3.0), T::ONE))?;
    Ok(())
}

/// The in-place views of a host tensor.
fn host_views<D: HostPlacement, T: Element>(fz: &mut Fuzz, a: &Tensor<D, T>) -> Result<(), TestCaseError> {
    let flat = Want::Out(vec![(vec![rule::numel(a.shape())], T::DTYPE)]);
    fz.check("as_slice", flat.clone(), None, || Ok(Host(vec![a.as_slice().len()])))?;
    let mut owned = a.clone();
    fz.check("as_mut_slice", flat, None, || owned.as_mut_slice().map(|s| Host(vec![s.len()])))?;
    let dims = Want::of(Some(wide(a.shape())), T::DTYPE);
    fz.check("as_ndarray", dims.clone(), None, || a.as_ndarray().map(|v| Host(v.shape().to_vec())))?;
    // Back from an array of that shape, where ndarray can hold one.
    let data = vec![T::ONE; a.numel()];
    if let Ok(array) = ndarray::ArrayD::from_shape_vec(ndarray::IxDyn(a.shape()), data) {
        fz.check("from_ndarray", dims, Some(a.device()), || Tensor::<D, T>::from_ndarray(array))?;
    }
    Ok(())
}

type Binary<D, T, U> = fn(&Tensor<D, T>, &Tensor<D, T>) -> Made<D, U>;
type WithScalar<D, T> = fn(&Tensor<D, T>, T) -> Made<D, u8>;
type Unary<D, T> = fn(&Tensor<D, T>) -> Made<D, T>;

/// Every op that takes any element type, on the case's operands of `T`; the first
/// operand and its value, for the ops of narrower types.
fn elems<D: Place, T: Scalars<D>>(fz: &mut Fuzz, place: D, c: &Case) -> Result<Operand<D, T>, TestCaseError> {
    fz.dtype = T::DTYPE.name();
    let dt = T::DTYPE;
    let dev = Some(place.id());
    let int = !dt.is_float();
    let (sa, sb, sm) = (&c.a[..], &c.b(), &c.mask());
    let a = make::<D, T>(fz, place, c.makers[0], T::from_f64(c.fills[0].into()), sa)?;
    let b = make::<D, T>(fz, place, c.makers[1], T::from_f64(c.fills[1].into()), sb)?;
    let mask = make::<D, u8>(fz, place, c.makers[2], 1, sm)?;

    // Factories beyond `make`'s.
    let (end, step) = (T::from_f64(c.end as f64), T::from_f64(c.step.into()));
    let range = rule::arange(0.0, end.to_f64(), step.to_f64(), dt == DType::I64);
    fz.check("arange", Want::of(range, dt), dev, || Tensor::<D, T>::arange_on(place, T::ZERO, end, step))?;
    let short = vec![T::ONE; data_len(sa, dt.size()) + 1];
    fz.check("bad from_vec (too much data)", Want::Err, dev, || Tensor::<D, T>::from_vec_on(place, short, sa))?;
    fz.check("bad concat (no parts)", Want::Err, dev, || Tensor::<D, T>::concat(&[]))?;
    fz.check("bad concat_dim (no parts)", Want::Err, dev, || Tensor::<D, T>::concat_dim(&[], 0))?;
    fz.check("bad stack (no parts)", Want::Err, dev, || Tensor::<D, T>::stack(&[], 0))?;

    // One-hot rows of the case's indices, in `T`.
    let classes = c.n;
    let values = index_values(&c.idx, c.idx.len(), classes);
    one_hot_of::<D, i32, T>(fz, place, &values, c.idx_kind, classes)?;
    one_hot_of::<D, i64, T>(fz, place, &values, c.idx_kind, classes)?;

    if let (Some((a, _)), Some((b, bv))) = (&a, &b) {
        let out = rule::broadcast(&[sa, sb]);
        // An integer division by zero fails, unless nothing is divided.
        let by_zero = int && *bv == T::ZERO && out.as_ref().is_some_and(|d| !d.contains(&0));
        fz.check("add", Want::of(out.clone(), dt), dev, || a + b)?;
        fz.check("sub", Want::of(out.clone(), dt), dev, || a - b)?;
        fz.check("mul", Want::of(out.clone(), dt), dev, || a * b)?;
        let quotient = if by_zero { Want::Err } else { Want::of(out.clone(), dt) };
        fz.check("div", quotient, dev, || a / b)?;
        let comparisons: [(&str, Binary<D, T, u8>); 6] = [
            ("eq", |x, y| x.eq(y)),
            ("ne", |x, y| x.ne(y)),
            ("lt", |x, y| x.lt(y)),
            ("le", |x, y| x.le(y)),
            ("gt", |x, y| x.gt(y)),
            ("ge", |x, y| x.ge(y)),
        ];
        for (name, f) in comparisons {
            fz.check(name, Want::of(out.clone(), DType::U8), dev, || f(a, b))?;
        }
        if let Some((m, _)) = &mask {
            fz.check("where_", Want::of(rule::broadcast(&[sm, sa, sb]), dt), dev, || Tensor::where_(m, a, b))?;
        }
        fz.check("cat", Want::of(rule::cat(&[sa, sb], 0), dt), dev, || a.cat(b))?;
        fz.check("concat", Want::of(rule::cat(&[sa, sb, sa], 0), dt), dev, || Tensor::concat(&[a, b, a]))?;
        fz.check("stack", Want::of(rule::stack(&[sa, sb], c.d0), dt), dev, || Tensor::stack(&[a, b], c.d0))?;

        // Operands of two devices, seen as `Dyn`: every two-tensor op fails.
        let other = if place.id() == DeviceId::Cpu { DeviceId::Cuda(0) } else { DeviceId::Cpu };
        let ad = a.clone().into_dyn();
        let moved = Want::of(Some(wide(sb)), dt);
        if let Some(bd) = fz.check("to_dyn", moved, Some(other), || b.to_dyn(other))? {
            fz.check("bad add (two devices)", Want::Err, dev, || &ad + &bd)?;
            fz.check("bad eq (two devices)", Want::Err, dev, || ad.eq(&bd))?;
            fz.check("bad matmul (two devices)", Want::Err, dev, || ad.matmul(&bd))?;
            fz.check("bad cat (two devices)", Want::Err, dev, || ad.cat(&bd))?;
            fz.check("bad cat_dim (two devices)", Want::Err, dev, || ad.cat_dim(&bd, c.d0))?;
            fz.check("bad stack (two devices)", Want::Err, dev, || Tensor::stack(&[&ad, &bd], c.d0))?;
            if let Some((m, _)) = &mask {
                let md = m.clone().into_dyn();
                fz.check("bad where_ (two devices)", Want::Err, dev, || Tensor::where_(&md, &ad, &bd))?;
            }
        }
    }

    // Matrix products, and cat along any dim, with their own partners.
    let (sr, sp, sq) = (&c.rhs(), &c.partner(c.d0), &c.partner(c.d1));
    let rhs = make::<D, T>(fz, place, c.makers[1], T::ONE, sr)?;
    let partner = make::<D, T>(fz, place, c.makers[1], T::ONE, sp)?;
    let partner2 = make::<D, T>(fz, place, c.makers[2], T::ONE, sq)?;
    if let (Some((a, _)), Some((r, _))) = (&a, &rhs) {
        fz.check("matmul", Want::of(rule::matmul(sa, sr), dt), dev, || a.matmul(r))?;
    }
    if let (Some((a, _)), Some((p, _))) = (&a, &partner) {
        fz.check("cat_dim", Want::of(rule::cat(&[sa, sp], c.d0), dt), dev, || a.cat_dim(p, c.d0))?;
    }
    if let (Some((a, _)), Some((q, _))) = (&a, &partner2) {
        let want = Want::of(rule::cat(&[sq, sa, sq], c.d1), dt);
        fz.check("concat_dim", want, dev, || Tensor::concat_dim(&[q, a, q], c.d1))?;
    }

    let Some((a, av)) = a else {
        fz.logging = false;
        D::own_ops::<T>(fz, sa, None)?;
        fz.logging = true;
        return Ok(None);
    };
    let numel = rule::numel(sa);
    let same = || Want::of(Some(wide(sa)), dt);
    let unary: [(&str, Unary<D, T>); 5] = [
        ("neg", |x| -x),
        ("relu", |x| x.relu()),
        ("abs", |x| x.abs()),
        ("square", |x| x.square()),
        ("clamp", |x| x.clamp(T::ZERO, T::ONE)),
    ];
    for (name, f) in unary {
        fz.check(name, same(), dev, || f(&a))?;
    }
    fz.check("bad clamp (min > max)", Want::Err, dev, || a.clamp(T::ONE, T::ZERO))?;
    for op in ['+', '-', '*', '/'] {
        fz.check(&format!("tensor {op} scalar"), same(), dev, || T::rhs(&a, op, T::ONE))?;
        let by_zero = op == '/' && int && av == T::ZERO && numel > 0;
        let want = if by_zero { Want::Err } else { same() };
        fz.check(&format!("scalar {op} tensor"), want, dev, || T::lhs(T::ONE, op, &a))?;
    }
    let want = if int && numel > 0 { Want::Err } else { same() };
    fz.check("tensor / 0", want, dev, || T::rhs(&a, '/', T::ZERO))?;
    let comparisons: [(&str, WithScalar<D, T>); 6] = [
        ("eq_scalar", |x, s| x.eq_scalar(s)),
        ("ne_scalar", |x, s| x.ne_scalar(s)),
        ("lt_scalar", |x, s| x.lt_scalar(s)),
        ("le_scalar", |x, s| x.le_scalar(s)),
        ("gt_scalar", |x, s| x.gt_scalar(s)),
        ("ge_scalar", |x, s| x.ge_scalar(s)),
    ];
    for (name, f) in comparisons {
        fz.check(name, Want::of(Some(wide(sa)), DType::U8), dev, || f(&a, T::ONE))?;
    }

    // Reductions.
    let one = || Want::of(Some(Vec::new()), dt);
    fz.check("sum", one(), dev, || a.sum())?;
    let extremum = if numel > 0 { one() } else { Want::Err };
    fz.check("max", extremum.clone(), dev, || a.max())?;
    fz.check("min", extremum, dev, || a.min())?;
    for (dim, keep) in [(c.d0, c.keepdim), (c.d1, !c.keepdim)] {
        fz.check("sum_dim", Want::of(rule::reduced(sa, dim, keep), dt), dev, || a.sum_dim(dim, keep))?;
        let arg = rule::arg_reduced(sa, dim, keep);
        let pair = arg.clone().map_or(Want::Err, |d| Want::Out(vec![(d.clone(), dt), (d, DType::I32)]));
        fz.check("max_dim", pair.clone(), dev, || a.max_dim(dim, keep))?;
        fz.check("min_dim", pair, dev, || a.min_dim(dim, keep))?;
        fz.check("argmax", Want::of(arg.clone(), DType::I32), dev, || a.argmax(dim, keep))?;
        fz.check("argmin", Want::of(arg, DType::I32), dev, || a.argmin(dim, keep))?;
    }

    // Layout.
    let (d0, d1) = (c.d0, c.d1);
    let (start, len) = c.range(sa.get(d0).copied());
    fz.check("narrow", Want::of(rule::narrow(sa, d0, start, len), dt), dev, || a.narrow(d0, start, len))?;
    let (index, _) = c.range(sa.get(d1).map(|&n| n.saturating_sub(1)));
    fz.check("select", Want::of(rule::select(sa, d1, index), dt), dev, || a.select(d1, index))?;
    let chunks = match rule::chunk(sa, c.n) {
        None => Want::Err,
        Some((parts, step, rows)) if parts <= 4096 => Want::Out(
            (0..parts)
                .map(|i| {
                    let mut d = wide(sa);
                    d[0] = step.min(rows - i * step) as u128;
                    (d, dt)
                })
                .collect(),
        ),
        // Rows of no elements are free: only the list of so many tensors bounds them.
        Some((parts, ..)) => match size(&[parts as u128], std::mem::size_of::<Tensor<D, T>>()) {
            Size::Refused => Want::Err,
            _ => Want::Skip,
        },
    };
    fz.check("chunk", chunks, dev, || a.chunk(c.n))?;
    let k = c.n.min(4);
    let copies = vec![&a; k];
    let want = Want::of(rule::stack(&vec![sa; k], d1), dt);
    fz.check("stack", want, dev, || Tensor::stack(&copies, d1))?;
    fz.check("t", Want::of(rule::t(sa), dt), dev, || a.t())?;
    // Dims in range, the dim just past the last, and far beyond.
    for (x, y) in [(d0, d1), (d0, sa.len().saturating_sub(1)), (sa.len(), 0), (usize::MAX, 0)] {
        fz.check("transpose", Want::of(rule::transpose(sa, x, y), dt), dev, || a.transpose(x, y))?;
    }
    let to = c.target();
    fz.check("reshape", Want::of(rule::reshape(sa, &to), dt), dev, || a.reshape(&to))?;
    fz.check("unsqueeze", Want::of(rule::unsqueeze(sa, d0), dt), dev, || a.unsqueeze(d0))?;
    fz.check("squeeze", Want::of(rule::squeeze(sa, d1), dt), dev, || a.squeeze(d1))?;

    // Element types.
    to_dtype::<D, T, f32>(fz, &a)?;
    to_dtype::<D, T, f64>(fz, &a)?;
    to_dtype::<D, T, bf16>(fz, &a)?;
    to_dtype::<D, T, f16>(fz, &a)?;
    to_dtype::<D, T, i32>(fz, &a)?;
    to_dtype::<D, T, i64>(fz, &a)?;
    to_dtype::<D, T, u8>(fz, &a)?;

    // Indices.
    for dim in [d0, d1] {
        let bound = sa.get(dim).copied().unwrap_or(3);
        let values = index_values(&c.idx, c.idx.len(), bound);
        index_select_by::<D, T, i32>(fz, &a, dim, &values, c.idx_kind)?;
        index_select_by::<D, T, i64>(fz, &a, dim, &values, c.idx_kind)?;
    }

    // Copies and views.
    fz.check("to::<Cpu>", same(), Some(DeviceId::Cpu), || a.to::<Cpu>())?;
    fz.check("to::<Cuda<0>>", same(), Some(DeviceId::Cuda(0)), || a.to::<Cuda<0>>())?;
    fz.check("to_dyn", same(), Some(second_gpu()), || a.to_dyn(second_gpu()))?;
    fz.check("into_dyn", same(), dev, || Ok(a.clone().into_dyn()))?;
    fz.check("detach", same(), dev, || Ok(a.detach()))?;
    let item = if numel == 1 { Want::Out(vec![(Vec::new(), dt)]) } else { Want::Err };
    fz.check("item", item, None, || a.item().map(|_| Host(Vec::new())))?;
    fz.check("to_vec", Want::Out(vec![(vec![numel], dt)]), None, || a.to_vec().map(|v| Host(vec![v.len()])))?;
    fz.check("to_ndarray", same(), None, || a.to_ndarray().map(|v| Host(v.shape().to_vec())))?;
    fz.check("Debug", Want::Out(vec![(Vec::new(), dt)]), None, || {
        let _ = format!("{a:?}");
        Ok(Host(Vec::new()))
    })?;

    // Across devices.
    let ids = [DeviceId::Cuda(0), second_gpu()];
    let split = |sizes: &[usize]| {
        rule::split(sa, sizes, 2).map_or(Want::Err, |parts| Want::Out(parts.into_iter().map(|d| (d, dt)).collect()))
    };
    let rows = sa.first().map_or_else(Vec::new, |&r| chunk_sizes(r, 2));
    let parts = fz.check("scatter", split(&rows), None, || scatter(&a, &ids[..]))?;
    let sizes = c.sizes();
    fz.check("scatter_sizes", split(&sizes), None, || scatter_sizes(&a, &ids[..], &sizes))?;
    if let Some(parts) = parts {
        fz.check("gather", same(), Some(DeviceId::Cpu), || gather(&parts, Cpu))?;
    }
    let twice = |d: Option<Dims>| d.map_or(Want::Err, |d| Want::Out(vec![(d.clone(), dt), (d, dt)]));
    if let Some(copies) = fz.check("broadcast", twice(Some(wide(sa))), None, || broadcast(&a, &ids[..]))? {
        fz.check("all_reduce_sum", twice(Some(wide(sa))), None, || all_reduce_sum(&copies))?;
        fz.check("all_gather", twice(rule::cat(&[sa, sa], 0)), None, || all_gather(&copies))?;
    }

    // What depends on the placement: its own ops, and checking it back from `Dyn`.
    fz.logging = false;
    D::own_ops(fz, sa, Some(&a))?;
    let back = |id: DeviceId| if place.id() == id { same() } else { Want::Err };
    fz.check("try_into_device::<Cpu>", back(DeviceId::Cpu), dev, || a.clone().into_dyn().try_into_device::<Cpu>())?;
    let want = back(DeviceId::Cuda(0));
    fz.check("try_into_device::<Cuda<0>>", want, dev, || a.clone().into_dyn().try_into_device::<Cuda<0>>())?;
    fz.logging = true;
    Ok(Some((a, av)))
}

fn to_dtype<D: Device, T: Element, U: Element>(fz: &mut Fuzz, a: &Tensor<D, T>) -> Result<(), TestCaseError> {
    let want = Want::of(Some(wide(a.shape())), U::DTYPE);
    fz.check(&format!("to_dtype::<{}>", U::DTYPE.name()), want, Some(a.device()), || a.to_dtype::<U>())?;
    Ok(())
}

fn index_select_by<D: Device + SamePlacement<D>, T: Element, I: IndexElement>(
    fz: &mut Fuzz,
    a: &Tensor<D, T>,
    dim: usize,
    values: &[i64],
    kind: u8,
) -> Result<(), TestCaseError> {
    let Some((index, held, shape)) = index_tensor::<D, I>(fz, a.placement(), values, kind)? else {
        return Ok(());
    };
    let want = Want::of(rule::index_select(a.shape(), dim, &shape, &held), T::DTYPE);
    let op = format!("index_select({})", I::DTYPE.name());
    fz.check(&op, want, Some(a.device()), || a.index_select(dim, &index))?;
    Ok(())
}

/// `one_hot::<U>` of an index tensor of `values` (see [`index_tensor`]).
fn one_hot_of<D: Device, I: IndexElement, U: Element>(
    fz: &mut Fuzz,
    place: D,
    values: &[i64],
    kind: u8,
    classes: usize,
) -> Result<(), TestCaseError> {
    if let Some((index, held, shape)) = index_tensor::<D, I>(fz, place, values, kind)? {
        one_hot_as::<D, I, U>(fz, &index, &held, &shape, classes)?;
    }
    Ok(())
}

fn one_hot_as<D: Device, I: IndexElement, U: Element>(
    fz: &mut Fuzz,
    index: &Tensor<D, I>,
    held: &[i64],
    shape: &[usize],
    classes: usize,
) -> Result<(), TestCaseError> {
    let mut want = Want::of(rule::one_hot(shape, held, classes), U::DTYPE);
    // Indices are compared with a `0..classes` row of i32 made first: a result too large
    // for memory (but not for its dims, which are checked at once) fails only after that
    // row is made, up to 8 GiB of work that the fuzz does not ask for.
    if let Want::Out(out) = &want {
        let row = size(&[classes as u128], 4);
        if !held.is_empty() && row != Size::Fits && !out.iter().any(|(d, t)| overflows(d, t.size())) {
            want = Want::Skip;
        }
    }
    let op = format!("one_hot({} -> {})", I::DTYPE.name(), U::DTYPE.name());
    fz.check(&op, want, Some(index.device()), || index.one_hot::<U>(classes))?;
    Ok(())
}

/// The ops of float types, then every other.
fn floats<D: Place, T: Float + Scalars<D>>(fz: &mut Fuzz, place: D, c: &Case) -> Result<(), TestCaseError> {
    let Some((a, _)) = elems::<D, T>(fz, place, c)? else {
        return Ok(());
    };
    let (dt, dev, sa) = (T::DTYPE, Some(place.id()), &c.a[..]);
    let same = || Want::of(Some(wide(sa)), dt);
    fz.check("rand", same(), dev, || Tensor::<D, T>::rand_on(place, sa, 7))?;
    fz.check("randn", same(), dev, || Tensor::<D, T>::randn_on(place, sa, 7))?;
    let unary: [(&str, Unary<D, T>); 10] = [
        ("exp", |x| x.exp()),
        ("sqrt", |x| x.sqrt()),
        ("sin", |x| x.sin()),
        ("cos", |x| x.cos()),
        ("log", |x| x.log()),
        ("tanh", |x| x.tanh()),
        ("sigmoid", |x| x.sigmoid()),
        ("gelu", |x| x.gelu()),
        ("gelu_tanh", |x| x.gelu_tanh()),
        ("pow", |x| x.pow(T::from_f64(2.0))),
    ];
    for (name, f) in unary {
        fz.check(name, same(), dev, || f(&a))?;
    }
    fz.check("mean", Want::of(Some(Vec::new()), dt), dev, || a.mean())?;
    for (dim, keep) in [(c.d0, c.keepdim), (c.d1, !c.keepdim)] {
        fz.check("mean_dim", Want::of(rule::reduced(sa, dim, keep), dt), dev, || a.mean_dim(dim, keep))?;
        fz.check("softmax", Want::of(rule::softmax(sa, dim), dt), dev, || a.softmax(dim))?;
        fz.check("log_softmax", Want::of(rule::softmax(sa, dim), dt), dev, || a.log_softmax(dim))?;
    }
    // Targets: mostly one per row, in range of the classes.
    let (rows, classes) = match *sa {
        [n, k] if n <= 64 && c.idx_kind % 8 != 7 => (n, k),
        [_, k] => (c.idx.len(), k),
        _ => (c.idx.len(), 3),
    };
    let values = index_values(&c.idx, rows, classes);
    cross_entropy_by::<D, T, i32>(fz, &a, &values, c.idx_kind)?;
    cross_entropy_by::<D, T, i64>(fz, &a, &values, c.idx_kind)?;
    Ok(())
}

fn cross_entropy_by<D: Device + SamePlacement<D>, T: Float, I: IndexElement>(
    fz: &mut Fuzz,
    logits: &Tensor<D, T>,
    values: &[i64],
    kind: u8,
) -> Result<(), TestCaseError> {
    // A 0-d target list is kept 1-d: `[1, n]` (kind 1) is the invalid rank tried.
    let kind = if kind % 4 == 0 { 2 } else { kind };
    let Some((targets, held, shape)) = index_tensor::<D, I>(fz, logits.placement(), values, kind)? else {
        return Ok(());
    };
    let want = Want::of(rule::cross_entropy(logits.shape(), &shape, &held), T::DTYPE);
    let op = format!("cross_entropy({})", I::DTYPE.name());
    fz.check(&op, want, Some(logits.device()), || logits.cross_entropy(&targets))?;
    Ok(())
}

/// The ops of index types (`one_hot` of the first operand into every type), then every
/// other.
fn ints<D: Place, I: IndexElement + Scalars<D>>(fz: &mut Fuzz, place: D, c: &Case) -> Result<(), TestCaseError> {
    let Some((a, av)) = elems::<D, I>(fz, place, c)? else {
        return Ok(());
    };
    // Every element holds `av`.
    let held = if a.numel() == 0 { Vec::new() } else { vec![av.to_i64()] };
    let sa = &c.a[..];
    one_hot_as::<D, I, f32>(fz, &a, &held, sa, c.n)?;
    one_hot_as::<D, I, f64>(fz, &a, &held, sa, c.n)?;
    one_hot_as::<D, I, bf16>(fz, &a, &held, sa, c.n)?;
    one_hot_as::<D, I, f16>(fz, &a, &held, sa, c.n)?;
    one_hot_as::<D, I, i32>(fz, &a, &held, sa, c.n)?;
    one_hot_as::<D, I, i64>(fz, &a, &held, sa, c.n)?;
    one_hot_as::<D, I, u8>(fz, &a, &held, sa, c.n)?;
    Ok(())
}

/// The first call where two placements' logs differ.
fn compare(a: &[(String, Outcome)], b: &[(String, Outcome)], names: (&str, &str)) -> Result<(), TestCaseError> {
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        if x != y {
            return fail(format!("call {i}: {} gave {x:?}, {} gave {y:?}", names.0, names.1));
        }
    }
    if a.len() != b.len() {
        return fail(format!("{} made {} calls, {} made {}", names.0, a.len(), names.1, b.len()));
    }
    Ok(())
}

/// cuda:1 where there are two devices, else cuda:0 (CI runs the tests with one too).
fn second_gpu() -> DeviceId {
    DeviceId::Cuda(if locus::device_count().unwrap_or(1) >= 2 { 1 } else { 0 })
}

/// The float types: the fuzz of [`fuzz`] in f32, f64, bf16 and f16.
#[test]
fn every_op_on_every_float_type_gives_the_reference_shape() {
    fuzz(0..4, "floats");
}

/// The integer and byte types (i32, i64, u8), in a test of its own so that both halves run
/// side by side.
#[test]
fn every_op_on_every_integer_type_gives_the_reference_shape() {
    fuzz(4..7, "integers");
}

/// Every op on the element types `dtypes` (0..7: f32, f64, bf16, f16, i32, i64, u8) of
/// random shapes on every placement: the same outcome on each, and every op reached.
fn fuzz(dtypes: std::ops::Range<u8>, label: &str) {
    // PROPTEST_CASES=40 keeps a debug run on a GPU, where every op waits for the device, short.
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(240);
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let fz = RefCell::new(Fuzz::default());
    let inputs = std::cell::Cell::new(0usize);
    let start = std::time::Instant::now();
    let result = runner.run(&case(), |c| {
        inputs.set(inputs.get() + 1);
        let fz = &mut *fz.borrow_mut();
        for dtype in dtypes.clone() {
            let cpu = fz.run_on(Cpu, dtype, &c)?;
            let cuda = fz.run_on(Cuda::<0>, dtype, &c)?;
            compare(&cpu, &cuda, ("cpu", "cuda:0"))?;
            let (third, name) = match c.third {
                0 => (fz.run_on(Pinned, dtype, &c)?, "pinned"),
                1 if second_gpu() == DeviceId::Cuda(1) => (fz.run_on(Cuda::<1>, dtype, &c)?, "cuda:1"),
                1 => (fz.run_on(Cuda::<0>, dtype, &c)?, "cuda:0 (one device)"),
                2 => (fz.run_on(Dyn::new(DeviceId::Cpu), dtype, &c)?, "Dyn cpu"),
                3 => (fz.run_on(Dyn::new(DeviceId::Cuda(0)), dtype, &c)?, "Dyn cuda:0"),
                _ => (fz.run_on(Dyn::new(second_gpu()), dtype, &c)?, "Dyn, the second GPU"),
            };
            compare(&cpu, &third, ("cpu", name))?;
        }
        Ok(())
    });
    let fz = fz.into_inner();
    let mut ops: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for ((op, dtype), [ok, err, skip]) in &fz.tally {
        ops.entry(op).or_default().push(format!("{dtype} {ok}/{err}/{skip}"));
    }
    let table: Vec<String> = ops.iter().map(|(op, counts)| format!("  {op}: {}", counts.join(", "))).collect();
    eprintln!(
        "shape fuzz ({label}): {} inputs tried ({cases} cases asked for), {} op calls, {} large but possible results not asked \
         for, {:.1} s; per op and element type, calls ok/err/not asked:\n{}",
        inputs.get(),
        fz.calls,
        fz.skipped,
        start.elapsed().as_secs_f64(),
        table.join("\n")
    );
    let mut slowest: Vec<_> = fz.time.iter().collect();
    slowest.sort_by(|a, b| b.1.cmp(a.1));
    let slowest: Vec<String> = slowest.iter().take(8).map(|(op, t)| format!("{op} {:.1} s", t.as_secs_f64())).collect();
    eprintln!("shape fuzz ({label}): the slowest ops: {}", slowest.join(", "));
    if let Err(e) = result {
        panic!("{e}");
    }
    // The generator reaches every op's valid input on every type, and every invalid call.
    let starved: Vec<String> = fz
        .tally
        .iter()
        .filter(|((op, _), [ok, err, _])| if op.starts_with("bad ") { *err == 0 } else { *ok == 0 })
        .map(|((op, dtype), _)| format!("{op} of {dtype}"))
        .collect();
    assert!(starved.is_empty(), "never reached (valid input; for `bad` calls, the call): {starved:?}");
}
