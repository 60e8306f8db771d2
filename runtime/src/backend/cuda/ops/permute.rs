//! Copies of a tensor with its dims in another order ([`Permute`]) on the cuda backend: a
//! device-to-device copy when nothing moves, the batched tiled transpose of matrix.cu when
//! the two inner blocks of elements swap, and the strided kernel `permute_{T}` (up to
//! [`MAX_DIMS`] dims after merging) for the rest.

use locus_kernels::Source;

use crate::backend::cuda::driver::buffer::CudaBuffer;
use crate::backend::cuda::driver::launch::{KernelArg, KernelArgs};
use crate::backend::cuda::driver::memory::{alloc, done};
use crate::backend::cuda::ops::matrix::{slice, transpose_batch};
use crate::backend::{Permute, MAX_PERMUTE_DIMS as MAX_DIMS};
use crate::element::DType;
use crate::error::{Error, Result};

/// Up to 8 dims of a strided copy: the output's dims, outermost first, and the source's
/// stride for each; matches `Strided` in matrix.cu.
#[repr(C)]
#[derive(Clone, Copy)]
struct Strided {
    rank: i32,
    shape: [u64; MAX_DIMS],
    stride: [u64; MAX_DIMS],
}

/// `#[repr(C)]` with the kernel's field order and types: `int` then two `u64[8]`.
impl KernelArg for Strided {}

/// The copy of `x` that `p` describes.
pub(in crate::backend::cuda) fn permute(x: &CudaBuffer, dtype: DType, p: &Permute) -> Result<CudaBuffer> {
    match p {
        &Permute::Copy { len } => slice(x, dtype, 0, len),
        &Permute::Transpose { batch, rows, cols } => transpose_batch(x, dtype, batch, rows, cols),
        Permute::Strided { dims } => strided(x, dtype, dims),
    }
}

fn strided(x: &CudaBuffer, dtype: DType, dims: &[(usize, usize)]) -> Result<CudaBuffer> {
    if dims.len() > MAX_DIMS {
        return Err(Error::InvalidArgument {
            op: "transpose",
            reason: format!("{} dims that cannot be merged; the cuda backend takes at most {MAX_DIMS}", dims.len()),
        });
    }
    let mut s = Strided { rank: dims.len() as i32, shape: [1; MAX_DIMS], stride: [0; MAX_DIMS] };
    for (i, &(n, st)) in dims.iter().enumerate() {
        (s.shape[i], s.stride[i]) = (n as u64, st as u64);
    }
    let len: usize = dims.iter().map(|d| d.0).product();
    let dev = x.device();
    let (stream, out) = alloc(dev, dtype, len, &[x])?;
    if len == 0 {
        return done(out);
    }
    let f = dev.kernel(Source::Matrix, "permute", "", dtype)?;
    let args = KernelArgs::new().ptr(x).ptr(&out).u64(len as u64).val(s);
    // `permute_{dtype}(const T* x, T* out, u64 n, Strided s)`: `out` holds `len` elements and `x` as many (a
    // permutation of the same tensor: every source index the dims and strides reach is below `len`), of `dtype`,
    // ready and kept alive on `stream` (see `alloc`);
    // SAFETY: as said above; the kernel's grid-stride loop bounds its output index by `len`.
    unsafe { dev.launch(f, (dev.grid(len as u64, 256), 1, 1), (256, 1, 1), &stream, args)? };
    done(out)
}
