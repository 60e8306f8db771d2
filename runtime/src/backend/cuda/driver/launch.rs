//! Kernel launches: the grid geometry the ops choose from, and the one call of
//! `cuLaunchKernel`, with its arguments from a [`KernelArgs`] list (`args`). What no
//! builder can check (that the values match the kernel's declared parameters, and that the
//! memory they name is live and ordered) stays the launch's `# Safety` contract.

use cudarc::driver::{result, sys};
use locus_kernels::Source;

pub(in crate::backend::cuda) use crate::backend::cuda::driver::args::{KernelArg, KernelArgs};
use crate::backend::cuda::driver::buffer::CudaBuffer;
use crate::backend::cuda::driver::device::{driver, failure, DeviceState, LAUNCH};
use crate::backend::cuda::driver::memory::{alloc, done};
use crate::backend::cuda::driver::stream::CudaStream;
use crate::backend::cuda::driver::timing;
use crate::element::DType;
use crate::error::Result;
use crate::faults::{gate, Point};

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
