//! User kernels (`#[locus::kernel]`) on the GPU. The source is compiled with NVRTC once
//! per kernel and device architecture (the PTX is shared by the devices of one
//! architecture), loaded once per device (`DeviceState::user_function`), and launched on
//! the given stream with its tensors ordered as the built-in ops order theirs: each is
//! used on the stream (a wait for its writer, its free after the launch), and outputs are
//! written in place between `before_write` and `after_write`.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use cudarc::nvrtc::{compile_ptx_with_opts, CompileError, CompileOptions, Ptx};

use crate::backend::api::user_kernel::{Grid, KernelArg, KernelSource};
use crate::backend::cuda::driver::buffer::CudaBuffer;
use crate::backend::cuda::driver::device::DeviceState;
use crate::backend::cuda::driver::launch::KernelArgs;
use crate::backend::cuda::driver::stream::CudaStream;
use crate::error::{Error, Result};

/// Compiled kernels by name, source and architecture (kernels of equal text, declared
/// twice, share their code); a failure is kept as its message, so a bad kernel is
/// compiled once and reported at every launch. Looked up once per kernel and device.
type PtxCache = HashMap<(&'static str, &'static str, (i32, i32)), std::result::Result<Ptx, String>>;

static PTX: LazyLock<Mutex<PtxCache>> = LazyLock::new(Default::default);

/// `k` compiled for `arch`, or what NVRTC said (with its log) as a message.
pub(in crate::backend::cuda) fn ptx(k: &'static KernelSource, arch: (i32, i32)) -> std::result::Result<Ptx, String> {
    k.check_text().map_err(|e| e.to_string())?;
    // One lock over the compile: two devices of one architecture wait for one compile.
    let mut cache = PTX.lock().unwrap_or_else(|p| p.into_inner());
    cache
        .entry((k.name, k.source, arch))
        .or_insert_with(|| {
            let file = match k.origin {
                "inline" => format!("{}.cu", k.name),
                path => path.replace('\0', ""),
            };
            let opts = CompileOptions {
                options: vec![format!("--gpu-architecture=compute_{}{}", arch.0, arch.1), "-std=c++17".into()],
                name: Some(file.clone()),
                ..Default::default()
            };
            compile_ptx_with_opts(k.source, opts).map_err(|e| match e {
                CompileError::CompileError { log, .. } => {
                    format!("NVRTC could not compile {file}:\n{}", log.to_string_lossy().trim_end())
                }
                other => format!("NVRTC failed on {file}: {other:?}"),
            })
        })
        .clone()
}

/// The device memory of a kernel argument, which must be on `dev`.
fn on_device<'a>(dev: &DeviceState, k: &KernelSource, c: &'a CudaBuffer) -> Result<&'a CudaBuffer> {
    if c.device().ordinal != dev.ordinal {
        return Err(Error::DeviceMismatch { op: k.name, lhs: dev.id(), rhs: c.device().id() });
    }
    Ok(c)
}

/// Queues `k` on `s` (a stream of `dev`) over `grid` with `args` (see
/// `BackendDevice::launch_kernel`).
pub(in crate::backend::cuda) fn launch(
    dev: &'static DeviceState,
    k: &'static KernelSource,
    s: &Arc<CudaStream>,
    grid: Grid,
    args: &[KernelArg<'_, CudaBuffer>],
) -> Result<()> {
    let f = dev.user_function(k)?;
    // After a first load, which may leave another context current.
    dev.bind()?;
    let mut values = KernelArgs::new();
    let mut written = Vec::new();
    for arg in args {
        values = match arg {
            KernelArg::Scalar(v) => values.scalar_bytes(v.bytes),
            KernelArg::Read(b, _) => {
                let c = on_device(dev, k, b)?;
                c.use_on(s)?;
                values.ptr(c)
            }
            KernelArg::Write(b, _) => {
                let c = on_device(dev, k, b)?;
                // Read-modify-write: wait for the last write, and for every reader since.
                c.use_on(s)?;
                c.before_write(s)?;
                written.push(c);
                values.ptr(c)
            }
        };
    }
    let [bx, by, bz] = grid.blocks();
    let [tx, ty, tz] = grid.threads();
    // `f` is `k` loaded on this device and `s` a live stream of it. The values are
    // one per parameter of the kernel, in order, of its types: `#[locus::kernel]` checked
    // the Rust signature against the C declaration when it compiled (a tensor for each
    // pointer, of its element type, a scalar of the C type's size for each value), and the
    // generated code pushes them in that order. Every tensor is memory of this device
    // (checked above), ordered for `s` (`use_on`, and `before_write` for outputs, which
    // are distinct memory: the tensor layer gives each output storage of its own) and
    // freed only after `s` is done with it (`use_on` records `s` as a user). That the
    // kernel stays within its tensors' lengths is the kernel source's contract, stated
    // in the macro's documentation.
    // SAFETY: the arguments, memory and ordering are as described above.
    unsafe { dev.launch_shared(f, ((bx, by, bz), (tx, ty, tz), grid.shared()), s, values)? };
    for c in written {
        c.after_write(s)?;
    }
    Ok(())
}
