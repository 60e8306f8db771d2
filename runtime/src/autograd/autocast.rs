//! Mixed precision without changing types (PyTorch's `torch.autocast`): inside
//! [`autocast`], a matrix product of f32 tensors casts both operands to the 16-bit type,
//! multiplies them there (f32 accumulation, a 16-bit result, as cuBLAS computes it), and
//! casts the result back, all recorded by the tape; reductions, softmax and losses stay
//! f32. The tensors keep their f32 type, so the rest of the program does not change; the
//! backward pass of each product runs in the 16-bit type too, as PyTorch's does.

use std::cell::Cell;

use crate::element::{DType, Element};

thread_local! {
    static AUTOCAST: Cell<Option<DType>> = const { Cell::new(None) };
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for half::bf16 {}
    impl Sealed for half::f16 {}
}

/// A 16-bit float type [`autocast`] computes in: [`bf16`](crate::bf16) or
/// [`f16`](crate::f16).
pub trait HalfFloat: Element + sealed::Sealed {}
impl HalfFloat for half::bf16 {}
impl HalfFloat for half::f16 {}

/// Runs `f` with f32 matrix products computed in `H` (`bf16` or `f16`) on this thread.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{bf16, Cuda, Param, Tensor};
/// let w = Param::new(Tensor::<Cuda<0>>::from_vec(vec![1.0 + 1.0 / 256.0, 2.0], [2, 1])?);
/// let x = Tensor::<Cuda<0>>::ones([1, 2])?;
/// let exact = x.matmul(&w)?.item()?;
/// let y = locus::autocast::<bf16, _>(|| x.matmul(&w))?;  // still a Tensor<Cuda<0>> of f32
/// assert_eq!(exact, 3.00390625);
/// assert_eq!(y.item()?, 3.0); // 1 + 1/256 has no bf16: the product saw 1.0
/// y.sum()?.backward()?;
/// assert_eq!(w.grad().unwrap().to_vec()?, vec![1.0, 1.0]);
/// # Ok::<(), locus::Error>(())
/// ```
pub fn autocast<H: HalfFloat, R>(f: impl FnOnce() -> R) -> R {
    struct Restore(Option<DType>);
    impl Drop for Restore {
        fn drop(&mut self) {
            AUTOCAST.with(|a| a.set(self.0));
        }
    }
    let _restore = Restore(AUTOCAST.with(|a| a.replace(Some(H::DTYPE))));
    f()
}

/// The 16-bit type f32 products compute in on this thread now, if any.
pub(crate) fn autocast_type() -> Option<DType> {
    AUTOCAST.with(Cell::get)
}
