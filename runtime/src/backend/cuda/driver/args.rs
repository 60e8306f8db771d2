//! The typed argument list of a kernel launch. The driver takes a kernel's parameters as
//! an array of untyped pointers, one per parameter, each at a value of exactly that
//! parameter's type; building that array by hand at every call site is how a `u32` ends
//! up where the kernel reads a `u64`. Here the ops push typed values into a builder that
//! owns them, and the pointer array exists only inside the launch, for the length of the
//! call.

use std::ffi::c_void;
use std::mem::{align_of, size_of, MaybeUninit};

use crate::backend::cuda::driver::buffer::CudaBuffer;
use crate::element::Scalar;

/// A value a kernel takes as a parameter, passed by copy of its bytes.
///
/// Implement it only for types whose bytes the kernel can take as they are: the primitive
/// element and count types, and `#[repr(C)]` mirrors of the kernel's own structs (such as
/// `Bcast`). A device address goes through [`KernelArgs::ptr`], not through this trait.
pub(in crate::backend::cuda) trait KernelArg: Copy + 'static {}

impl KernelArg for u8 {}
impl KernelArg for u16 {}
impl KernelArg for i32 {}
impl KernelArg for i64 {}
impl KernelArg for u64 {}
impl KernelArg for f32 {}
impl KernelArg for f64 {}
/// A value of up to 8 bytes as its bytes, for the scalars of user kernels: the kernel reads
/// the first `size_of` its parameter's type of them.
impl KernelArg for [u8; 8] {}

/// Words kept in place before a list moves to the heap: enough for every built-in kernel
/// but the broadcasting ones (whose `Bcast` alone is 25 words), and small enough that
/// moving a list through the builder's calls is a few register moves, not a `memcpy`.
const INLINE: usize = 12;

/// A list that outgrew the inline room: every word and start, on the heap.
struct Spill {
    words: Vec<MaybeUninit<u64>>,
    starts: Vec<usize>,
}

/// The parameters of one kernel launch, in order, each owned by value: for
/// `exp_f32(const f32* x, f32* out, u64 n)`, `KernelArgs::new().ptr(x).ptr(&out).u64(n)`.
pub(in crate::backend::cuda) struct KernelArgs {
    /// The values' bytes, each starting on a word of its own, so that every value sits at
    /// an 8-byte boundary (enough for any [`KernelArg`], which is checked) and keeps its
    /// place however many values come after it. Padding bytes stay uninitialised.
    words: [MaybeUninit<u64>; INLINE],
    /// The first word of each value, in parameter order.
    starts: [u8; INLINE],
    /// How many of `words` and of `starts` are used (while nothing has spilled).
    words_len: u8,
    starts_len: u8,
    /// Everything, once a value did not fit in place.
    spill: Option<Box<Spill>>,
}

impl KernelArgs {
    /// An empty argument list, with room in place for the values of most kernels.
    #[inline(always)]
    pub(in crate::backend::cuda) fn new() -> Self {
        Self { words: [MaybeUninit::uninit(); INLINE], starts: [0; INLINE], words_len: 0, starts_len: 0, spill: None }
    }

    /// Appends `value` as the next parameter.
    #[inline(always)]
    pub(in crate::backend::cuda) fn val<T: KernelArg>(mut self, value: T) -> Self {
        const { assert!(align_of::<T>() <= align_of::<u64>(), "a kernel argument aligned beyond 8 bytes") };
        let n = size_of::<T>().div_ceil(size_of::<u64>()).max(1);
        let (used, count) = (self.words_len as usize, self.starts_len as usize);
        let at = match &mut self.spill {
            None if used + n <= INLINE && count < INLINE => {
                self.starts[count] = used as u8;
                (self.words_len, self.starts_len) = ((used + n) as u8, (count + 1) as u8);
                self.words[used..].as_mut_ptr()
            }
            spill => {
                let spill = spill.get_or_insert_with(|| {
                    let starts = self.starts[..count].iter().map(|&s| s as usize).collect();
                    Box::new(Spill { words: self.words[..used].to_vec(), starts })
                });
                let start = spill.words.len();
                spill.words.resize(start + n, MaybeUninit::uninit());
                spill.starts.push(start);
                spill.words[start..].as_mut_ptr()
            }
        };
        // The `n` words from `at` on (just added) hold at least `size_of::<T>()` bytes, start at an 8-byte boundary
        // (the alignment of `u64`, at least `T`'s: asserted above) and are owned by `self` alone.
        // SAFETY: as just said, `at` is valid and aligned for a write of one `T`, which reads nothing.
        unsafe { at.cast::<T>().write(value) };
        self
    }

    /// Appends the device address of `buf`, for a `T*` parameter.
    #[inline(always)]
    pub(in crate::backend::cuda) fn ptr(self, buf: &CudaBuffer) -> Self {
        self.val::<u64>(buf.ptr())
    }

    /// Appends the device address `offset` bytes into `buf`, for a `T*` parameter.
    #[inline(always)]
    pub(in crate::backend::cuda) fn ptr_at(self, buf: &CudaBuffer, offset: u64) -> Self {
        debug_assert!(offset <= buf.bytes() as u64, "an offset past the end of the buffer");
        self.val::<u64>(buf.ptr() + offset)
    }

    /// Appends the device address of `buf`, or a null pointer when there is none (a
    /// parameter the kernel touches only in a case the caller has ruled out).
    #[inline(always)]
    pub(in crate::backend::cuda) fn ptr_or_null(self, buf: Option<&CudaBuffer>) -> Self {
        self.val::<u64>(buf.map_or(0, CudaBuffer::ptr))
    }

    /// Appends a `u64` (the kernels' counts and strides).
    #[inline(always)]
    pub(in crate::backend::cuda) fn u64(self, value: u64) -> Self {
        self.val(value)
    }

    /// Appends an `f64` (`arange`'s start and step, whatever the element type).
    #[inline(always)]
    pub(in crate::backend::cuda) fn f64(self, value: f64) -> Self {
        self.val(value)
    }

    /// Appends a user kernel's scalar: its bytes first in a word of its own, which is what
    /// a parameter of its C type (8 bytes or less) reads.
    #[inline(always)]
    pub(in crate::backend::cuda) fn scalar_bytes(self, bytes: [u8; 8]) -> Self {
        self.val(bytes)
    }

    /// Appends `value` in its own element type (a `T` parameter of that type).
    #[inline(always)]
    pub(in crate::backend::cuda) fn scalar(self, value: Scalar) -> Self {
        match value {
            Scalar::F32(v) => self.val(v),
            Scalar::F64(v) => self.val(v),
            Scalar::I32(v) => self.val(v),
            Scalar::I64(v) => self.val(v),
            Scalar::U8(v) => self.val(v),
            // The kernels' `bf16` and `f16` are one `unsigned short` of the same bits.
            Scalar::BF16(v) => self.val(v.to_bits()),
            Scalar::F16(v) => self.val(v.to_bits()),
        }
    }

    /// The array `cuLaunchKernel` takes: one pointer per parameter, at its value. The
    /// pointers stay valid while `self` is neither moved, changed nor dropped.
    pub(in crate::backend::cuda::driver) fn pointers(&mut self) -> Pointers {
        let mut p = Pointers { inline: [std::ptr::null_mut(); INLINE], len: 0, heap: Vec::new() };
        match &mut self.spill {
            None => {
                let base = self.words.as_mut_ptr();
                p.len = self.starts_len as usize;
                // Every start lies within `words`, so each pointer is in bounds.
                for (to, &i) in p.inline.iter_mut().zip(&self.starts[..p.len]) {
                    *to = base.wrapping_add(i as usize).cast::<c_void>();
                }
            }
            Some(spill) => {
                let base = spill.words.as_mut_ptr();
                p.heap = spill.starts.iter().map(|&i| base.wrapping_add(i).cast::<c_void>()).collect();
            }
        }
        p
    }
}

/// The pointer array of [`KernelArgs::pointers`]: in place up to [`INLINE`] values.
pub(in crate::backend::cuda::driver) struct Pointers {
    inline: [*mut c_void; INLINE],
    len: usize,
    heap: Vec<*mut c_void>,
}

impl Pointers {
    pub(in crate::backend::cuda::driver) fn as_mut_slice(&mut self) -> &mut [*mut c_void] {
        match self.heap.is_empty() {
            true => &mut self.inline[..self.len],
            false => &mut self.heap,
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::cuda::driver::args::*;

    /// `len` bytes of parameter `i` of `args`, from `offset` on.
    fn bytes(args: &mut KernelArgs, i: usize, offset: usize, len: usize) -> Vec<u8> {
        let p = args.pointers().as_mut_slice()[i].cast::<u8>().wrapping_add(offset);
        // SAFETY: every range the test reads lies within a value written by the builder
        // (never in a struct's padding), and `args` outlives the copy made here.
        unsafe { std::slice::from_raw_parts(p, len) }.to_vec()
    }

    #[test]
    fn kernel_args_keep_each_value_in_order_at_its_own_aligned_slot() {
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Pair {
            tag: i32,
            wide: [u64; 2],
        }
        impl KernelArg for Pair {}
        let mut args = KernelArgs::new()
            .u64(7)
            .scalar(Scalar::U8(9))
            .val(Pair { tag: -1, wide: [3, 4] })
            .scalar(Scalar::F32(1.5))
            .f64(-2.0);
        let mut p = args.pointers();
        let p = p.as_mut_slice();
        assert_eq!(p.len(), 5);
        assert!(p.iter().all(|p| (*p as usize) % 8 == 0));
        assert_eq!(bytes(&mut args, 0, 0, 8), 7u64.to_ne_bytes());
        assert_eq!(bytes(&mut args, 1, 0, 1), [9]);
        assert_eq!(bytes(&mut args, 2, 0, 4), (-1i32).to_ne_bytes());
        assert_eq!(bytes(&mut args, 2, 8, 8), 3u64.to_ne_bytes());
        assert_eq!(bytes(&mut args, 2, 16, 8), 4u64.to_ne_bytes());
        assert_eq!(bytes(&mut args, 3, 0, 4), 1.5f32.to_ne_bytes());
        assert_eq!(bytes(&mut args, 4, 0, 8), (-2.0f64).to_ne_bytes());
    }

    #[test]
    fn kernel_args_past_the_inline_room_move_to_the_heap_whole() {
        // 2 * INLINE + 1 values of one word, then a value of three: the words spill once,
        // the starts once, and every value still reads back in order.
        let mut args = KernelArgs::new();
        for i in 0..2 * INLINE as u64 + 1 {
            args = args.u64(i * 3 + 1);
        }
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Three([u64; 3]);
        impl KernelArg for Three {}
        args = args.val(Three([5, 6, 7]));
        let count = 2 * INLINE + 2;
        let mut p = args.pointers();
        assert_eq!(p.as_mut_slice().len(), count);
        for i in 0..count - 1 {
            assert_eq!(bytes(&mut args, i, 0, 8), (i as u64 * 3 + 1).to_ne_bytes(), "value {i}");
        }
        assert_eq!(bytes(&mut args, count - 1, 16, 8), 7u64.to_ne_bytes());
    }
}
