//! The host backend's launches of user kernels: a kernel's Rust fallback, queued as a job
//! on the stream like any host op. The host backend cannot run CUDA C, so a kernel
//! without a fallback is `Error::NoHostKernel`, before anything is queued.

use std::sync::Arc;

use crate::backend::api::user_kernel::{no_host_kernel, HostCall, KernelArg, KernelSource, ScalarArg};
use crate::backend::host::buffer::Span;
use crate::backend::host::streams::{after_write, before_write, use_on_stream, HostStream};
use crate::backend::host::HostBuffer;
use crate::backend::sync::hazard::Kind;
use crate::element::DType;
use crate::error::Result;

/// Queues `kernel`'s fallback on `s` over `args` (see `BackendDevice::launch_kernel`).
pub(in crate::backend::host) fn launch(
    kernel: &'static KernelSource,
    s: &Arc<HostStream>,
    args: &[KernelArg<'_, HostBuffer>],
) -> Result<()> {
    let Some(fallback) = kernel.host else { return Err(no_host_kernel(kernel)) };
    let mut scalars: Vec<ScalarArg> = Vec::new();
    let mut inputs: Vec<(Span, DType)> = Vec::new();
    let mut outputs: Vec<(Span, DType)> = Vec::new();
    let mut uses = Vec::new();
    let mut written = Vec::new();
    for arg in args {
        match arg {
            KernelArg::Scalar(v) => scalars.push(*v),
            KernelArg::Read(b, dtype) => {
                let h: &HostBuffer = b;
                use_on_stream(h, s)?;
                inputs.push((h.span(), *dtype));
                if HostStream::uses_wanted() {
                    uses.push((h.region(Some(*dtype)), Kind::Read));
                }
            }
            KernelArg::Write(b, dtype) => {
                let h: &HostBuffer = b;
                // Read-modify-write: the job waits for the last write and for every reader
                // since, on any stream.
                use_on_stream(h, s)?;
                before_write(h, s)?;
                outputs.push((h.span(), *dtype));
                written.push(h);
                if HostStream::uses_wanted() {
                    uses.push((h.region(Some(*dtype)), Kind::Write));
                }
            }
        }
    }
    let name = kernel.name;
    let job = Box::new(move || {
        let ins: Vec<(&[u8], DType)> = inputs
            .iter()
            // SAFETY: each input was written before this job in stream order (`use_on_stream`
            // above), and nothing writes it while the job runs: outputs are other memory
            // (the tensor layer gives every output storage of its own).
            .map(|(span, dtype)| (unsafe { span.bytes() }, *dtype))
            .collect();
        let mut outs: Vec<(&mut [u8], DType)> = outputs
            .iter_mut()
            // SAFETY: every earlier use of an output is ordered before this job (`before_write`
            // above) and every later one after it (`after_write` below); outputs are distinct
            // memory, none of them an input.
            .map(|(span, dtype)| (unsafe { span.bytes_mut() }, *dtype))
            .collect();
        let mut call = HostCall::new(name, &scalars, &ins, &mut outs);
        // A failed fallback is what a faulting kernel is on a GPU: the stream's sticky
        // error, reported by its next synchronize or host read.
        if let Err(e) = fallback(&mut call) {
            panic!("{e}");
        }
    });
    s.launch(name, &uses, job)?;
    drop(uses);
    for h in written {
        after_write(h, s);
    }
    Ok(())
}
