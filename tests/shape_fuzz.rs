//! Shape arithmetic on bad input (issue 14): every op returns `Ok` or `Err` and never
//! panics, whatever the shapes; a tensor too large to exist is an `Err` naming the op,
//! refused before anything is allocated.
//!
//! The focused tests are the issue's cases, and the hangs the property test found. The
//! property test drives every op with random shapes whose dims come from {0, 1, 2, 3,
//! 4..=8, 2^20, 2^33, usize::MAX / 2, usize::MAX}, on cpu, pinned, cuda:0 and `Dyn`
//! placements, in `f32` and `u8`, and prints how many inputs and op calls it ran. A call
//! that panics fails the case, so does one that succeeds where its result cannot exist,
//! and one that runs for over 20 s ends the process (a hang). It never asks for a result
//! between [`BUDGET`] and [`REFUSED`] bytes: such a tensor could exist, and would really
//! be allocated.

use std::panic::{catch_unwind, AssertUnwindSafe};

use locus::parallel::{all_gather, all_reduce_sum, broadcast, gather, scatter, scatter_sizes};
use locus::{Cpu, Cuda, Dataset, Device, DeviceId, Dyn, Element, Error, Loader, Pinned, StaticDevice, Tensor};
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

// The property test.

/// Bytes of one result the fuzz lets be allocated for real.
const BUDGET: u128 = 1 << 16;
/// Bytes beyond any address space (256 TiB): asking for a result this large fails on
/// every system, whatever its overcommit policy, before anything is touched.
const REFUSED: u128 = 1 << 48;

/// What asking for a result of some shape must do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Size {
    /// Small or empty: it may be made.
    Fits,
    /// Too large to exist, or for any memory: it must be an error.
    Refused,
    /// Large but possible: the fuzz does not ask.
    Skip,
}

/// Classifies a shape (dims as u128, so that a sum of dims cannot overflow here).
fn size(dims: &[u128], elem: usize) -> Size {
    let span = dims.iter().fold(elem as u128, |a, &d| a.saturating_mul(d.max(1)));
    if span > isize::MAX as u128 || dims.iter().any(|&d| d > usize::MAX as u128) {
        Size::Refused
    } else if dims.contains(&0) || span <= BUDGET {
        Size::Fits
    } else if span >= REFUSED {
        Size::Refused
    } else {
        Size::Skip
    }
}

fn wide(s: &[usize]) -> Vec<u128> {
    s.iter().map(|&d| d as u128).collect()
}

/// NumPy broadcasting of two shapes, if they fit together.
fn broadcast_shape(a: &[usize], b: &[usize]) -> Option<Vec<u128>> {
    let rank = a.len().max(b.len());
    let at = |s: &[usize], i: usize| if i + s.len() < rank { 1 } else { s[i + s.len() - rank] };
    (0..rank)
        .map(|i| match (at(a, i), at(b, i)) {
            (x, y) if x == y => Some(x as u128),
            (1, y) => Some(y as u128),
            (x, 1) => Some(x as u128),
            _ => None,
        })
        .collect()
}

/// The shape of `a.matmul(b)`, if the shapes fit together: `[m, k] x [k, n]`,
/// `[b, m, k] x [b, k, n]` or `[b, m, k] x [k, n]`.
fn matmul_shape(a: &[usize], b: &[usize]) -> Option<Vec<u128>> {
    match (a, b) {
        (&[m, k], &[k2, n]) if k == k2 => Some(wide(&[m, n])),
        (&[bt, m, k], &[b2, k2, n]) if k == k2 && bt == b2 => Some(wide(&[bt, m, n])),
        (&[bt, m, k], &[k2, n]) if k == k2 => Some(wide(&[bt, m, n])),
        _ => None,
    }
}

/// Shapes stacked along dim 0, if their other dims agree.
fn cat_shape(parts: &[&[usize]]) -> Option<Vec<u128>> {
    let first = parts[0];
    if parts.iter().any(|p| p.is_empty() || p[1..] != first[1..]) {
        return None;
    }
    let mut out = wide(first);
    out[0] = parts.iter().map(|p| p[0] as u128).sum();
    Some(out)
}

fn dim() -> impl Strategy<Value = usize> {
    prop_oneof![
        3 => Just(0usize),
        3 => Just(1),
        2 => Just(2),
        2 => Just(3),
        2 => 4usize..=8,
        1 => Just(1 << 20),
        1 => Just(1 << 33),
        1 => Just(usize::MAX / 2),
        1 => Just(usize::MAX),
    ]
}

fn shape() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec(dim(), 0..=4)
}

#[derive(Clone, Debug)]
struct Case {
    placement: u8,
    float: bool,
    /// How the operands are made (see [`make`]).
    maker: u8,
    a: Vec<usize>,
    b: Vec<usize>,
    /// A reshape target.
    c: Vec<usize>,
    dim: usize,
    n: usize,
    sizes: Vec<usize>,
}

fn case() -> impl Strategy<Value = Case> {
    (
        (0u8..5, any::<bool>(), 0u8..5),
        (shape(), shape(), shape()),
        (0usize..5, dim(), prop::collection::vec(dim(), 0..=3)),
    )
        .prop_map(|((placement, float, maker), (a, b, c), (dim, n, sizes))| Case {
            placement,
            float,
            maker,
            a,
            b,
            c,
            dim,
            n,
            sizes,
        })
}

/// Counts what the fuzz ran.
#[derive(Default)]
struct Fuzz {
    calls: usize,
    skipped: usize,
}

fn message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>().cloned().or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
}

impl Fuzz {
    /// Runs `f`, whose result has shape `out` where known: a panic fails the case, and
    /// so does success where the result cannot exist. `None` when it failed or was not
    /// asked for.
    fn call<R>(
        &mut self,
        what: &str,
        out: Option<Vec<u128>>,
        elem: usize,
        f: impl FnOnce() -> locus::Result<R>,
    ) -> Result<Option<R>, TestCaseError> {
        let class = out.as_deref().map_or(Size::Fits, |s| size(s, elem));
        self.run(what, class, &format!("a result of shape {out:?}"), f)
    }

    /// Runs `f`, which must fail if `class` is [`Size::Refused`]; `result` says what it makes.
    fn run<R>(
        &mut self,
        what: &str,
        class: Size,
        result: &str,
        f: impl FnOnce() -> locus::Result<R>,
    ) -> Result<Option<R>, TestCaseError> {
        if class == Size::Skip {
            self.skipped += 1;
            return Ok(None);
        }
        self.calls += 1;
        watchdog::entering(what, result);
        match catch_unwind(AssertUnwindSafe(f)) {
            Err(p) => Err(TestCaseError::fail(format!("{what} panicked: {}", message(p)))),
            Ok(Ok(_)) if class == Size::Refused => {
                Err(TestCaseError::fail(format!("{what} succeeded, but {result} cannot exist")))
            }
            Ok(Ok(r)) => Ok(Some(r)),
            Ok(Err(_)) => Ok(None),
        }
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
        *CURRENT.lock().unwrap_or_else(|p| p.into_inner()) = format!("{what}, making {result}");
        CALLS.fetch_add(1, Ordering::Relaxed);
    }
}

/// An operand of `shape` on `place`, made as `maker` says.
fn make<D: Device, T: Element>(
    fz: &mut Fuzz,
    place: D,
    maker: u8,
    shape: &[usize],
) -> Result<Option<Tensor<D, T>>, TestCaseError> {
    let e = size_of::<T>();
    let out = Some(wide(shape));
    match maker {
        0 => fz.call("zeros", out, e, || Tensor::<D, T>::zeros_on(place, shape)),
        1 => fz.call("ones", out, e, || Tensor::<D, T>::ones_on(place, shape)),
        2 => fz.call("full", out, e, || Tensor::<D, T>::full_on(place, shape, T::ONE)),
        3 => {
            // Data only for what fits; for the rest, no data (the shape is refused first).
            let len = if size(&wide(shape), e) == Size::Fits { shape.iter().product() } else { 0 };
            fz.call("from_vec", out, e, || Tensor::<D, T>::from_vec_on(place, vec![T::ONE; len], shape))
        }
        _ => {
            let empty = Tensor::<D, T>::zeros_on(place, [0]).map_err(|e| TestCaseError::fail(e.to_string()))?;
            let r = fz.call("reshape", out, e, || empty.reshape(shape))?;
            Ok(match r {
                Some(t) => Some(t),
                None => fz.call("zeros", Some(wide(shape)), e, || Tensor::<D, T>::zeros_on(place, shape))?,
            })
        }
    }
}

fn size_of<T: Element>() -> usize {
    std::mem::size_of::<T>()
}

/// Every op of one element type on `a` and `b`; `typed` runs the ops of that type alone.
fn drive<D: Device, T: Element>(
    fz: &mut Fuzz,
    place: D,
    c: &Case,
    typed: impl Fn(&mut Fuzz, &Tensor<D, T>) -> Result<(), TestCaseError>,
) -> Result<(), TestCaseError> {
    let e = size_of::<T>();
    let a = make::<D, T>(fz, place, c.maker, &c.a)?;
    let b = make::<D, T>(fz, place, c.maker, &c.b)?;
    if let (Some(a), Some(b)) = (&a, &b) {
        let out = broadcast_shape(&c.a, &c.b);
        fz.call("add", out.clone(), e, || a + b)?;
        fz.call("sub", out.clone(), e, || a - b)?;
        fz.call("mul", out.clone(), e, || a * b)?;
        fz.call("div", out, e, || a / b)?;
        fz.call("matmul", matmul_shape(&c.a, &c.b), e, || a.matmul(b))?;
        fz.call("cat", cat_shape(&[&c.a, &c.b]), e, || a.cat(b))?;
        fz.call("concat", cat_shape(&[&c.a, &c.b, &c.a]), e, || Tensor::concat(&[a, b, a]))?;
    }
    let Some(a) = a else { return Ok(()) };
    let fits = size(&wide(&c.a), e) == Size::Fits;
    typed(fz, &a)?;
    fz.call("neg", None, e, || -&a)?;
    fz.call("relu", None, e, || a.relu())?;
    fz.call("sum", None, e, || a.sum())?;
    fz.call("max", None, e, || a.max())?;
    // A sum over an empty dim is zeros, as many as the other dims make.
    let summed = (c.dim < c.a.len()).then(|| {
        let mut s = wide(&c.a);
        s.remove(c.dim);
        s
    });
    fz.call("sum_dim", summed, e, || a.sum_dim(c.dim, false))?;
    fz.call("t", None, e, || a.t())?;
    // Dims in range, not yet in range (the dim just past the last), and far beyond.
    for (d0, d1) in [(0, c.dim), (c.dim, c.a.len().saturating_sub(1)), (c.a.len(), 0), (usize::MAX, 0)] {
        let out = (d0 < c.a.len() && d1 < c.a.len()).then(|| {
            let mut s = wide(&c.a);
            s.swap(d0, d1);
            s
        });
        fz.call("transpose", out, e, || a.transpose(d0, d1))?;
    }
    fz.call("reshape", Some(wide(&c.c)), e, || a.reshape(&c.c))?;
    // The list of chunks is memory too: a few thousand are made, more only when no
    // memory could hold the list (rows of no elements are free, so only it bounds them).
    let parts = match (c.a.first(), c.n) {
        (Some(&len), n) if n > 0 => len.div_ceil(len.div_ceil(n).max(1)),
        _ => 0,
    };
    let class = match size(&[parts as u128], std::mem::size_of::<Tensor<D, T>>()) {
        _ if parts <= 4096 => Size::Fits,
        Size::Refused => Size::Refused,
        _ => Size::Skip,
    };
    fz.run("chunk", class, &format!("a list of {parts} tensors"), || a.chunk(c.n))?;
    fz.call("item", None, e, || a.item())?;
    if fits {
        fz.call("to_vec", None, e, || a.to_vec())?;
    }
    fz.call("to", None, e, || a.to::<Cpu>())?;
    fz.call("to", None, e, || a.to::<Cuda<0>>())?;
    fz.call("to_dyn", None, e, || a.to_dyn(DeviceId::Cuda(1)))?;
    fz.call("into_dyn", None, e, || a.clone().into_dyn().try_into_device::<Cpu>())?;
    let ids = [DeviceId::Cuda(0), DeviceId::Cuda(1)];
    let parts = fz.call("scatter", None, e, || scatter(&a, &ids[..]))?;
    fz.call("scatter_sizes", None, e, || scatter_sizes(&a, &ids[..], &c.sizes))?;
    if let Some(parts) = parts {
        fz.call("gather", None, e, || gather(&parts, Cpu))?;
    }
    let copies = fz.call("broadcast", None, e, || broadcast(&a, &ids[..]))?;
    if let Some(copies) = copies {
        fz.call("all_reduce_sum", None, e, || all_reduce_sum(&copies))?;
        fz.call("all_gather", cat_shape(&[&c.a, &c.a]), e, || all_gather(&copies))?;
    }
    Ok(())
}

fn float_ops<D: Device>(fz: &mut Fuzz, a: &Tensor<D, f32>) -> Result<(), TestCaseError> {
    fz.call("exp", None, 4, || a.exp())?;
    fz.call("sqrt", None, 4, || a.sqrt())?;
    fz.call("mean", None, 4, || a.mean())?;
    fz.call("mul", None, 4, || a * 2.0)?;
    fz.call("div", None, 4, || a / 0.0)?;
    fz.call("rand", Some(wide(a.shape())), 4, || Tensor::<D>::rand_on(a.placement(), a.shape(), 7))?;
    Ok(())
}

fn byte_ops<D: Device>(fz: &mut Fuzz, a: &Tensor<D, u8>) -> Result<(), TestCaseError> {
    fz.call("add", None, 1, || a + 1u8)?;
    fz.call("div", None, 1, || a / 0u8)?;
    Ok(())
}

fn run_case<D: Device>(fz: &mut Fuzz, place: D, c: &Case) -> Result<(), TestCaseError> {
    if c.float {
        drive::<D, f32>(fz, place, c, float_ops)
    } else {
        drive::<D, u8>(fz, place, c, byte_ops)
    }
}

#[test]
fn every_op_on_random_shapes_returns_instead_of_panicking() {
    // PROPTEST_CASES=300 keeps a debug run on a GPU, where every op waits for the device, short.
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(3000);
    let mut runner = TestRunner::new(Config { cases, failure_persistence: None, ..Config::default() });
    let fz = std::cell::RefCell::new(Fuzz::default());
    let inputs = std::cell::Cell::new(0usize);
    let result = runner.run(&case(), |c| {
        inputs.set(inputs.get() + 1);
        let fz = &mut *fz.borrow_mut();
        match c.placement {
            0 => run_case(fz, Cpu, &c),
            1 => run_case(fz, Cuda::<0>, &c),
            2 => run_case(fz, Pinned, &c),
            3 => run_case(fz, Dyn::new(DeviceId::Cpu), &c),
            _ => run_case(fz, Dyn::new(DeviceId::Cuda(0)), &c),
        }
    });
    let fz = fz.into_inner();
    eprintln!(
        "shape fuzz: {} inputs tried ({cases} cases asked for), {} op calls, {} large but possible results not asked for",
        inputs.get(),
        fz.calls,
        fz.skipped
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}
