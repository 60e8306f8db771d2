//! Kernels of the user's (`#[locus::kernel]`) as the backends see them: the CUDA C source
//! and name ([`KernelSource`]), the launch geometry ([`Grid`]), the arguments in
//! parameter order ([`KernelArg`]), and what a host fallback is handed ([`HostCall`]).
//!
//! The cuda backend compiles the source with NVRTC (once per kernel and device
//! architecture) and launches it; the host backend runs the Rust fallback as a job on the
//! stream, or refuses with `Error::NoHostKernel`. Both order the tensors the same way:
//! every tensor is used on the stream (its writer first), and outputs are written in
//! place (`before_write`, then `after_write` once the launch is queued).

use std::any::type_name;

use crate::element::{DType, Element};
use crate::error::{Error, Result};

/// A host fallback, as the macro wraps it: it takes its scalars and tensors from the
/// call in parameter order.
pub type HostKernel = fn(&mut HostCall<'_>) -> Result<()>;

/// One kernel of the user's: what `#[locus::kernel]` puts in a `static`. Its address
/// never changes, so backends key their caches by it.
#[doc(hidden)]
#[derive(Debug)]
pub struct KernelSource {
    /// The `extern "C" __global__` function's name.
    pub name: &'static str,
    /// The CUDA C source.
    pub source: &'static str,
    /// Where the source came from, for messages: the file as the attribute named it, or
    /// `inline`.
    pub origin: &'static str,
    /// The Rust fallback run by the host backend, if any.
    pub host: Option<HostKernel>,
}

impl KernelSource {
    /// What the macro emits.
    pub const fn new(name: &'static str, source: &'static str, origin: &'static str, host: Option<HostKernel>) -> Self {
        KernelSource { name, source, origin, host }
    }

    /// This kernel's identity: the address of its `static`, which never moves.
    pub(crate) fn id(&'static self) -> usize {
        self as *const KernelSource as usize
    }

    /// Checks what NVRTC and the driver take as C strings: a NUL would cut them short.
    pub(crate) fn check_text(&self) -> Result<()> {
        let nul = |what: &str| Error::InvalidArgument {
            op: self.name,
            reason: format!("the kernel's {what} contains a NUL byte, which CUDA's C strings cannot hold"),
        };
        if self.name.contains('\0') {
            return Err(nul("name"));
        }
        if self.source.contains('\0') {
            return Err(nul("source"));
        }
        Ok(())
    }
}

/// The geometry of a launch: blocks in the grid, threads in a block (x, y, z), and bytes
/// of dynamic shared memory per block.
///
/// A kernel launched without one gets [`Grid::linear`] of its first output's element
/// count (of its first tensor's, when it has no output).
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::Grid;
/// assert_eq!(Grid::linear(1000).blocks(), [4, 1, 1]);
/// assert_eq!(Grid::linear(1000).threads(), [256, 1, 1]);
/// let g = Grid::new([16, 16, 1], [16, 16, 1]).shared_bytes(4096);
/// assert_eq!(g.shared(), 4096);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid {
    blocks: [u32; 3],
    threads: [u32; 3],
    shared: u32,
}

/// Threads per block of [`Grid::linear`].
const LINEAR_BLOCK: u32 = 256;

impl Grid {
    /// `blocks` blocks of `threads` threads each, no dynamic shared memory.
    pub const fn new(blocks: [u32; 3], threads: [u32; 3]) -> Self {
        Grid { blocks, threads, shared: 0 }
    }

    /// One thread per element of `n`: blocks of 256 threads, as many as `n` needs (none
    /// for `n == 0`, which launches nothing). A count beyond the grid's limit gives a
    /// grid the launch refuses; use a grid-stride loop and [`Grid::new`] for that.
    pub const fn linear(n: usize) -> Self {
        let blocks = n.div_ceil(LINEAR_BLOCK as usize);
        let blocks = if blocks > u32::MAX as usize { u32::MAX } else { blocks as u32 };
        Grid::new([blocks, 1, 1], [LINEAR_BLOCK, 1, 1])
    }

    /// The same geometry with `bytes` of dynamic shared memory per block (a kernel's
    /// `extern __shared__` array); up to 48 KiB, beyond which the driver refuses the
    /// launch (an `Err`).
    pub const fn shared_bytes(self, bytes: u32) -> Self {
        Grid { shared: bytes, ..self }
    }

    /// Blocks in the grid: x, y, z.
    pub const fn blocks(&self) -> [u32; 3] {
        self.blocks
    }

    /// Threads in a block: x, y, z.
    pub const fn threads(&self) -> [u32; 3] {
        self.threads
    }

    /// Bytes of dynamic shared memory per block.
    pub const fn shared(&self) -> u32 {
        self.shared
    }

    /// Whether the grid has no blocks: such a launch does nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.blocks.contains(&0)
    }

    /// Checks the limits every CUDA device has (compute capability 3.0 and later), so a
    /// bad grid is the same error on both backends. `kernel` names the launch.
    pub(crate) fn check(&self, kernel: &'static str) -> Result<()> {
        let bad = |reason: String| Err(Error::InvalidArgument { op: kernel, reason });
        let [x, y, z] = self.threads;
        if x == 0 || y == 0 || z == 0 {
            return bad(format!("a block of {x}×{y}×{z} threads has none; every dimension needs at least 1"));
        }
        if (x as u64) * (y as u64) * (z as u64) > 1024 || x > 1024 || y > 1024 || z > 64 {
            return bad(format!(
                "a block of {x}×{y}×{z} threads is over CUDA's limit (1024 threads, at most 1024×1024×64)"
            ));
        }
        let [bx, by, bz] = self.blocks;
        if bx > i32::MAX as u32 || by > 65535 || bz > 65535 {
            return bad(format!(
                "a grid of {bx}×{by}×{bz} blocks is over CUDA's limit (2^31-1 × 65535 × 65535); \
                 use fewer blocks and a grid-stride loop"
            ));
        }
        Ok(())
    }
}

/// A scalar a kernel takes by value: a primitive whose bytes the kernel reads as they
/// are. The C type each stands for is checked by `#[locus::kernel]`.
pub trait KernelScalar: Copy + Send + 'static + sealed::Sealed {
    /// The value's bytes, in the first `size_of::<Self>()` bytes.
    #[doc(hidden)]
    fn to_bytes(self) -> [u8; 8];
    /// The value from those bytes.
    #[doc(hidden)]
    fn from_bytes(bytes: [u8; 8]) -> Self;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! kernel_scalar {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl KernelScalar for $t {
            fn to_bytes(self) -> [u8; 8] {
                let mut out = [0; 8];
                out[..size_of::<$t>()].copy_from_slice(&self.to_ne_bytes());
                out
            }
            fn from_bytes(bytes: [u8; 8]) -> Self {
                let mut mine = [0; size_of::<$t>()];
                mine.copy_from_slice(&bytes[..size_of::<$t>()]);
                <$t>::from_ne_bytes(mine)
            }
        }
    )*};
}
kernel_scalar!(f32, f64, i8, u8, i16, u16, i32, u32, i64, u64, isize, usize);

impl sealed::Sealed for bool {}
impl KernelScalar for bool {
    fn to_bytes(self) -> [u8; 8] {
        [self as u8, 0, 0, 0, 0, 0, 0, 0]
    }
    fn from_bytes(bytes: [u8; 8]) -> Self {
        bytes[0] != 0
    }
}

/// A scalar argument: its bytes (the value's first, the rest zero), and its Rust type's
/// name (what the host fallback checks it takes back).
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScalarArg {
    pub bytes: [u8; 8],
    pub type_name: &'static str,
}

impl ScalarArg {
    pub(crate) fn new<S: KernelScalar>(value: S) -> Self {
        ScalarArg { bytes: value.to_bytes(), type_name: type_name::<S>() }
    }
}

/// One argument of a launch, in the kernel's parameter order.
#[derive(Debug)]
pub(crate) enum KernelArg<'a, B> {
    /// A value parameter.
    Scalar(ScalarArg),
    /// A `const T*` parameter: the kernel reads this memory.
    Read(&'a B, DType),
    /// A `T*` parameter: the kernel may read and write this memory, in place.
    Write(&'a B, DType),
}

/// What a host fallback is handed: the launch's scalars, inputs and outputs, each taken
/// in parameter order by the code `#[locus::kernel]` generates.
#[doc(hidden)]
#[derive(Debug)]
pub struct HostCall<'c> {
    kernel: &'static str,
    scalars: std::slice::Iter<'c, ScalarArg>,
    inputs: std::slice::Iter<'c, (&'c [u8], DType)>,
    outputs: std::slice::IterMut<'c, (&'c mut [u8], DType)>,
}

impl<'c> HostCall<'c> {
    pub(crate) fn new(
        kernel: &'static str,
        scalars: &'c [ScalarArg],
        inputs: &'c [(&'c [u8], DType)],
        outputs: &'c mut [(&'c mut [u8], DType)],
    ) -> Self {
        HostCall { kernel, scalars: scalars.iter(), inputs: inputs.iter(), outputs: outputs.iter_mut() }
    }

    fn mismatch(&self, what: String) -> Error {
        Error::InvalidArgument { op: self.kernel, reason: format!("the host fallback asked for {what}") }
    }

    /// The next scalar, as `S`.
    pub fn scalar<S: KernelScalar>(&mut self) -> Result<S> {
        match self.scalars.next() {
            Some(a) if a.type_name == type_name::<S>() => Ok(S::from_bytes(a.bytes)),
            Some(a) => Err(self.mismatch(format!("a `{}` where the launch has a `{}`", type_name::<S>(), a.type_name))),
            None => Err(self.mismatch("more scalars than the launch has".into())),
        }
    }

    /// The next input tensor's elements.
    pub fn input<T: Element>(&mut self) -> Result<&'c [T]> {
        match self.inputs.next() {
            Some(&(bytes, dtype)) if dtype == T::DTYPE => {
                bytemuck::try_cast_slice(bytes).map_err(|e| self.mismatch(format!("{} elements: {e}", T::DTYPE)))
            }
            Some(&(_, dtype)) => Err(self.mismatch(format!("{} elements where an input holds {dtype}", T::DTYPE))),
            None => Err(self.mismatch("more inputs than the launch has".into())),
        }
    }

    /// The next output tensor's elements, to write in place.
    pub fn output<T: Element>(&mut self) -> Result<&'c mut [T]> {
        match self.outputs.next() {
            Some((bytes, dtype)) if *dtype == T::DTYPE => {
                let bytes: &'c mut [u8] = std::mem::take(bytes);
                let kernel = self.kernel;
                bytemuck::try_cast_slice_mut(bytes).map_err(|e| Error::InvalidArgument {
                    op: kernel,
                    reason: format!("the host fallback asked for {} elements: {e}", T::DTYPE),
                })
            }
            Some((_, dtype)) => {
                let dtype = *dtype;
                Err(self.mismatch(format!("{} elements where an output holds {dtype}", T::DTYPE)))
            }
            None => Err(self.mismatch("more outputs than the launch has".into())),
        }
    }
}

/// The error of a host launch of a kernel without a fallback.
pub(crate) fn no_host_kernel(k: &KernelSource) -> Error {
    Error::NoHostKernel { kernel: k.name.to_string() }
}

#[cfg(test)]
mod tests {
    use crate::backend::api::user_kernel::*;

    #[test]
    fn scalars_keep_their_bytes_and_type() {
        let args = [ScalarArg::new(1.5f32), ScalarArg::new(-3i64), ScalarArg::new(true), ScalarArg::new(7usize)];
        let ins: [(&[u8], DType); 0] = [];
        let mut outs: [(&mut [u8], DType); 0] = [];
        let mut c = HostCall::new("k", &args, &ins, &mut outs);
        assert_eq!(c.scalar::<f32>().unwrap(), 1.5);
        assert_eq!(c.scalar::<i64>().unwrap(), -3);
        assert!(c.scalar::<bool>().unwrap());
        assert!(matches!(c.scalar::<u32>(), Err(Error::InvalidArgument { .. })), "a usize read as a u32");
        assert!(c.scalar::<f32>().is_err(), "past the end");
    }

    #[test]
    fn tensors_come_back_typed_and_checked() {
        let x = [1.0f32, 2.0];
        let mut y = [0f32; 2];
        let ins = [(bytemuck::cast_slice::<f32, u8>(&x), DType::F32)];
        let mut outs = [(bytemuck::cast_slice_mut::<f32, u8>(&mut y), DType::F32)];
        let mut c = HostCall::new("k", &[], &ins, &mut outs);
        let a = c.input::<f32>().unwrap();
        let b = c.output::<f32>().unwrap();
        b[1] = a[1] * 2.0;
        assert!(c.output::<f32>().is_err());
        assert_eq!(y[1], 4.0);
        let ins = [(&[0u8; 4][..], DType::I32)];
        let mut outs: [(&mut [u8], DType); 0] = [];
        assert!(HostCall::new("k", &[], &ins, &mut outs).input::<f32>().is_err());
    }

    #[test]
    fn grids_are_checked_against_cuda_limits() {
        assert!(Grid::linear(0).is_empty());
        assert_eq!(Grid::linear(257).blocks(), [2, 1, 1]);
        assert!(Grid::linear(1 << 20).check("k").is_ok());
        assert!(Grid::new([1, 1, 1], [0, 1, 1]).check("k").is_err());
        assert!(Grid::new([1, 1, 1], [1025, 1, 1]).check("k").is_err());
        assert!(Grid::new([1, 1, 1], [32, 32, 2]).check("k").is_err());
        assert!(Grid::new([1, 65536, 1], [32, 1, 1]).check("k").is_err());
        assert!(Grid::linear(usize::MAX).check("k").is_err());
    }
}
