//! Kernel launches: the typed argument list ([`KernelArgs`]), the grid geometry the ops
//! choose from, and the one call of `cuLaunchKernel`. The driver takes a kernel's
//! parameters as an array of untyped pointers, one per parameter, each at a value of
//! exactly that parameter's type; building that array by hand at every call site is how a
//! `u32` ends up where the kernel reads a `u64`. Here the ops push typed values into a
//! builder that owns them, and the pointer array exists only inside [`DeviceState::launch`],
//! for the length of the call. What no builder can check (that the values match the
//! kernel's declared parameters, and that the memory they name is live and ordered) stays
//! the launch's `# Safety` contract.

use std::ffi::c_void;
use std::mem::{align_of, size_of, MaybeUninit};

use cudarc::driver::{result, sys};
use locus_kernels::Source;

use crate::backend::cuda::driver::buffer::CudaBuffer;
use crate::backend::cuda::driver::device::{driver, failure, DeviceState, LAUNCH};
use crate::backend::cuda::driver::memory::{alloc, done};
use crate::backend::cuda::driver::stream::CudaStream;
use crate::backend::cuda::driver::timing;
use crate::element::{DType, Scalar};
use crate::error::Result;
use crate::faults::{gate, Point};

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

/// Values kept in place before a list moves to the heap: enough for every built-in
/// kernel, so that building an argument list allocates nothing.
const INLINE: usize = 16;

/// A list of up to `N` values in place, more on the heap (then all of them there).
struct Slots<T: Copy, const N: usize> {
    len: usize,
    inline: [T; N],
    heap: Vec<T>,
}

impl<T: Copy, const N: usize> Slots<T, N> {
    fn new(fill: T) -> Self {
        Slots { len: 0, inline: [fill; N], heap: Vec::new() }
    }

    fn push(&mut self, value: T) {
        if self.heap.is_empty() && self.len < N {
            self.inline[self.len] = value;
        } else {
            if self.heap.is_empty() {
                self.heap.extend_from_slice(&self.inline[..self.len]);
            }
            self.heap.push(value);
        }
        self.len += 1;
    }

    fn as_mut_slice(&mut self) -> &mut [T] {
        match self.heap.is_empty() {
            true => &mut self.inline[..self.len],
            false => &mut self.heap,
        }
    }
}

/// The parameters of one kernel launch, in order, each owned by value: for
/// `exp_f32(const f32* x, f32* out, u64 n)`, `KernelArgs::new().ptr(x).ptr(&out).u64(n)`.
pub(in crate::backend::cuda) struct KernelArgs {
    /// The values' bytes, each starting on a word of its own, so that every value sits at
    /// an 8-byte boundary (enough for any [`KernelArg`], which is checked) and keeps its
    /// place however many values come after it. Padding bytes stay uninitialised.
    words: Slots<MaybeUninit<u64>, INLINE>,
    /// The first word of each value, in parameter order.
    starts: Slots<usize, INLINE>,
}

impl KernelArgs {
    /// An empty argument list, with room in place for the values of every built-in kernel.
    pub(in crate::backend::cuda) fn new() -> Self {
        Self { words: Slots::new(MaybeUninit::uninit()), starts: Slots::new(0) }
    }

    /// Appends `value` as the next parameter.
    pub(in crate::backend::cuda) fn val<T: KernelArg>(mut self, value: T) -> Self {
        const { assert!(align_of::<T>() <= align_of::<u64>(), "a kernel argument aligned beyond 8 bytes") };
        let start = self.words.len;
        for _ in 0..size_of::<T>().div_ceil(size_of::<u64>()).max(1) {
            self.words.push(MaybeUninit::uninit());
        }
        let at = self.words.as_mut_slice()[start..].as_mut_ptr().cast::<T>();
        // The words from `at` on (just added) hold at least `size_of::<T>()` bytes, start at an 8-byte boundary
        // (the alignment of `u64`, at least `T`'s: asserted above) and are owned by `self.words` alone.
        // SAFETY: as just said, `at` is valid and aligned for a write of one `T`, which reads nothing.
        unsafe { at.write(value) };
        self.starts.push(start);
        self
    }

    /// Appends the device address of `buf`, for a `T*` parameter.
    pub(in crate::backend::cuda) fn ptr(self, buf: &CudaBuffer) -> Self {
        self.val::<u64>(buf.ptr())
    }

    /// Appends the device address `offset` bytes into `buf`, for a `T*` parameter.
    pub(in crate::backend::cuda) fn ptr_at(self, buf: &CudaBuffer, offset: u64) -> Self {
        debug_assert!(offset <= buf.bytes() as u64, "an offset past the end of the buffer");
        self.val::<u64>(buf.ptr() + offset)
    }

    /// Appends the device address of `buf`, or a null pointer when there is none (a
    /// parameter the kernel touches only in a case the caller has ruled out).
    pub(in crate::backend::cuda) fn ptr_or_null(self, buf: Option<&CudaBuffer>) -> Self {
        self.val::<u64>(buf.map_or(0, CudaBuffer::ptr))
    }

    /// Appends a `u64` (the kernels' counts and strides).
    pub(in crate::backend::cuda) fn u64(self, value: u64) -> Self {
        self.val(value)
    }

    /// Appends an `f64` (`arange`'s start and step, whatever the element type).
    pub(in crate::backend::cuda) fn f64(self, value: f64) -> Self {
        self.val(value)
    }

    /// Appends a user kernel's scalar: its bytes first in a word of its own, which is what
    /// a parameter of its C type (8 bytes or less) reads.
    pub(in crate::backend::cuda) fn scalar_bytes(self, bytes: [u8; 8]) -> Self {
        self.val(bytes)
    }

    /// Appends `value` in its own element type (a `T` parameter of that type).
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
    fn pointers(&mut self) -> Slots<*mut c_void, INLINE> {
        let base = self.words.as_mut_slice().as_mut_ptr();
        let mut pointers = Slots::new(std::ptr::null_mut());
        // Every start lies within `words`, so each pointer is in bounds.
        for &i in self.starts.as_mut_slice().iter() {
            pointers.push(base.wrapping_add(i).cast::<c_void>());
        }
        pointers
    }
}

/// Vectors per thread in the elementwise kernels (`UNROLL` in elementwise.cu).
const UNROLL: u64 = 4;

/// The work items of a vectorised elementwise kernel over `n` elements of `dtype`: each
/// thread takes `UNROLL` vectors of 16 bytes.
pub(in crate::backend::cuda) fn vector_work(n: u64, dtype: DType) -> u64 {
    n.div_ceil(16 / dtype.size() as u64).div_ceil(UNROLL)
}

/// A grid of one `block`-thread block per `block` work items: for kernels whose threads
/// each do a fixed amount (the unrolled elementwise ones).
pub(in crate::backend::cuda) fn flat_grid(work: u64, block: u32) -> u32 {
    work.div_ceil(block as u64).clamp(1, i32::MAX as u64) as u32
}

impl DeviceState {
    /// A grid for `work` items at `block` threads each: enough blocks to fill the device,
    /// then grid-stride loops.
    pub(in crate::backend::cuda) fn grid(&self, work: u64, block: u32) -> u32 {
        let fill = self.sm_count.max(1) as u64 * (2048 / block as u64).max(1);
        work.div_ceil(block as u64).clamp(1, fill) as u32
    }

    /// Launches `f` on `stream` with the given geometry and arguments.
    ///
    /// # Safety
    /// - `f` is a function of this device's modules (from [`DeviceState::kernel`] or
    ///   [`DeviceState::function`]), and `stream` a live stream of this device.
    /// - `args` holds exactly one value per parameter `f` declares, in order, each of
    ///   exactly that parameter's type and size: [`KernelArgs::ptr`] for a `T*`,
    ///   [`KernelArgs::u64`] for a `u64` count, [`KernelArgs::scalar`] of the element type
    ///   for a `T`, a `#[repr(C)]` struct laid out as the kernel's through
    ///   [`KernelArgs::val`], ... The driver copies the values during this call.
    /// - Every device address among them is an allocation usable by this device (its
    ///   own, or a peer's with access enabled) holding at least the elements the kernel
    ///   reads or writes for this geometry and these counts, and stays allocated until the
    ///   launch completes on `stream` (stream-ordered frees on `stream`, or frees that
    ///   wait for it).
    /// - Memory the kernel reads was written before the launch in `stream`'s order, and
    ///   no other stream reads or writes what it writes until ordered after it.
    pub(in crate::backend::cuda) unsafe fn launch(
        &self,
        f: sys::CUfunction,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        stream: &CudaStream,
        args: KernelArgs,
    ) -> Result<()> {
        // SAFETY: the caller's contract, which is this one's with no shared memory.
        unsafe { self.launch_shared(f, (grid, block, 0), stream, args) }
    }

    /// [`DeviceState::launch`] with `shared` bytes of dynamic shared memory per block.
    ///
    /// # Safety
    /// As for [`DeviceState::launch`]; `shared` is at most what `f` may use (the driver
    /// refuses more with an error).
    pub(in crate::backend::cuda) unsafe fn launch_shared(
        &self,
        f: sys::CUfunction,
        (grid, block, shared): ((u32, u32, u32), (u32, u32, u32), u32),
        stream: &CudaStream,
        mut args: KernelArgs,
    ) -> Result<()> {
        self.bind()?;
        let mut pointers = args.pointers();
        let span = timing::begin(stream);
        // This device's context is current (bind above); `f`, `stream`, the values in `args` and the memory they
        // name are valid for this launch by the caller's contract.
        // SAFETY: as said above; `pointers` points into `args`, alive until the call (which copies the values) returns.
        let r = gate(Point::Launch, failure(LAUNCH), || unsafe {
            result::launch_kernel(f, grid, block, shared, stream.raw.0, pointers.as_mut_slice())
        })
        .map_err(driver(self.ordinal, "cuLaunchKernel"));
        timing::finish(span, stream, &r, || {
            let args = format!(
                r#""grid":[{},{},{}],"block":[{},{},{}],"shared":{shared}"#,
                grid.0, grid.1, grid.2, block.0, block.1, block.2
            );
            (kernel_name(f).into(), args)
        });
        r
    }
}

/// The name `f` was compiled under (`add_f32`, a user kernel's own), for traces.
fn kernel_name(f: sys::CUfunction) -> String {
    let mut name: *const std::ffi::c_char = std::ptr::null();
    // SAFETY: `f` is a live function of a loaded module (the launch just used it); the
    // driver writes a pointer to a NUL-terminated string it owns, valid while the module
    // is loaded, which is read at once and copied.
    let ok = unsafe { sys::cuFuncGetName(&mut name, f) } == sys::CUresult::CUDA_SUCCESS && !name.is_null();
    if ok {
        // SAFETY: as above: non-null, NUL-terminated, alive during this copy.
        unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned()
    } else {
        "kernel".to_string()
    }
}

/// A new `len`-element buffer on `dev` written by one 1-d launch of kernel `{op}_{dtype}`
/// of `source` over `work` items.
///
/// # Safety
/// `args`, given the output, returns the arguments of that kernel as
/// [`DeviceState::launch`] requires them: one per kernel parameter, in order, each of that
/// parameter's type. Every device address among them other than the output is a buffer
/// of `inputs` holding what the kernel reads for `len` elements of `dtype`. The output
/// holds `len` elements of `dtype`.
pub(in crate::backend::cuda) unsafe fn produce(
    dev: &'static DeviceState,
    dtype: DType,
    len: usize,
    (source, op, work): (Source, &'static str, u64),
    inputs: &[&CudaBuffer],
    args: impl FnOnce(&CudaBuffer) -> KernelArgs,
) -> Result<CudaBuffer> {
    let (s, out) = alloc(dev, dtype, len, inputs)?;
    if len > 0 {
        let f = dev.kernel(source, op, "", dtype)?;
        let args = args(&out);
        // SAFETY: `f` is `{op}_{dtype}` of this device; `args` matches its parameters and names `out` (`len`
        // elements, allocated on `s`) and buffers of `inputs` (made ready on `s` and kept alive past the kernel by
        // `alloc`): the caller's contract. The kernels bound every access by their count, whatever the grid.
        unsafe { dev.launch(f, (flat_grid(work, 256), 1, 1), (256, 1, 1), &s, args)? };
    }
    done(out)
}

#[cfg(test)]
mod tests {
    use crate::backend::cuda::driver::launch::*;

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

    #[test]
    fn vectorised_work_and_flat_grids_cover_every_element() {
        assert_eq!(vector_work(0, DType::F32), 0);
        assert_eq!(vector_work(1, DType::F32), 1);
        assert_eq!(vector_work(16, DType::F32), 1);
        assert_eq!(vector_work(17, DType::F32), 2);
        assert_eq!(vector_work(64, DType::U8), 1);
        assert_eq!(flat_grid(0, 256), 1);
        assert_eq!(flat_grid(257, 256), 2);
        assert_eq!(flat_grid(u64::MAX, 1), i32::MAX as u32);
    }
}
