//! The host backend's compute ops. On a simulated device an op is a kernel queued on the
//! current stream: its inputs are prepared for that stream (cross-stream waits), its
//! output is allocated at once and written when the stream's worker reaches the job,
//! as on a GPU. On the `cpu` and `pinned` placements the kernel runs on the calling
//! thread.

use std::sync::{Arc, Mutex};

use super::buffer::{HostBuffer, Span};
use super::streams::{current_stream, host_mem, use_on_stream};
use super::HostBackend;
use crate::backend::hazard::Kind;
use crate::backend::host_kernels::{self as k, Geometry};
use crate::backend::{float_only, BinaryOp, Blocks, Buffer, ParamOp, ReduceOp, UnaryOp};
use crate::device_id::DeviceId;
use crate::element::{with_dtype, DType, Element, Scalar};
use crate::error::{Error, Result};
use crate::shape::{Layout, Reduction};

/// A kernel: the inputs' bytes, the output's bytes.
type Kernel = Box<dyn FnOnce(&[&[u8]], &mut [u8]) -> Result<()> + Send + 'static>;

fn typed<T: Element>(b: &[u8]) -> &[T] {
    bytemuck::cast_slice(b)
}

fn typed_mut<T: Element>(b: &mut [u8]) -> &mut [T] {
    bytemuck::cast_slice_mut(b)
}

/// How an op is launched: its name, the device and the output's type and length.
#[derive(Clone, Copy, Debug)]
pub(super) struct Launch {
    pub op: &'static str,
    pub device: DeviceId,
    pub dtype: DType,
    /// Elements of the output.
    pub len: usize,
    /// Wait for the kernel and return its error (as the cuda backend does for integer
    /// division, whose zero divisor the kernel finds).
    pub check: bool,
}

impl HostBackend {
    /// Runs `kernel` over `inputs` into a new buffer (see the module doc).
    pub(super) fn launch(&'static self, l: Launch, inputs: &[&Buffer], kernel: Kernel) -> Result<Buffer> {
        let ins: Vec<&HostBuffer> = inputs.iter().map(|b| host_mem(b)).collect::<Result<_>>()?;
        let bytes = l.len.checked_mul(l.dtype.size()).ok_or(Error::OutOfMemory {
            device: l.device,
            requested: usize::MAX,
            free: 0,
        })?;
        let account = self.account(l.device)?;
        if l.device.is_host() {
            let mut out = HostBuffer::alloc(account, bytes, None)?;
            let views: Vec<&[u8]> = ins.iter().map(|h| h.bytes()).collect();
            kernel(&views, out.bytes_mut())?;
            return Ok(Buffer::Host(out));
        }
        let stream = current_stream(l.device);
        for h in &ins {
            use_on_stream(h, &stream)?;
        }
        let out = HostBuffer::alloc(account, bytes, Some(Arc::clone(&stream)))?;
        let spans: Vec<Span> = ins.iter().map(|h| h.span()).collect();
        let mut target = out.span();
        let result: Arc<Mutex<Result<()>>> = Arc::new(Mutex::new(Ok(())));
        let slot = l.check.then(|| Arc::clone(&result));
        let job = Box::new(move || {
            // SAFETY: the job runs on the stream that owns the output, after its inputs'
            // writers (the waits `use_on_stream` queued, or the same stream); the output
            // is fresh, and every later use is ordered after this job. The checker books
            // these uses below and reports any that is not so ordered.
            let views: Vec<&[u8]> = spans.iter().map(|s| unsafe { s.bytes() }).collect();
            // SAFETY: as above: nothing else uses the fresh output while the job runs.
            let r = kernel(&views, unsafe { target.bytes_mut() });
            match (slot, r) {
                (Some(slot), r) => *slot.lock().unwrap_or_else(|p| p.into_inner()) = r,
                (None, Ok(())) => {}
                // A kernel that cannot fail did: a sticky error of the stream.
                (None, Err(e)) => panic!("{e}"),
            }
        });
        let mut uses: Vec<_> = ins.iter().map(|h| (h.region(Some(l.dtype)), Kind::Read)).collect();
        uses.push((out.region(Some(l.dtype)), Kind::Write));
        let (seq, clock) = stream.launch(l.op, &uses, job)?;
        drop(uses);
        if l.check {
            stream.wait_job(seq, &clock)?;
            std::mem::replace(&mut *result.lock().unwrap_or_else(|p| p.into_inner()), Ok(()))?;
        }
        Ok(Buffer::Host(out))
    }

    fn simple(op: &'static str, device: DeviceId, dtype: DType, len: usize) -> Launch {
        Launch { op, device, dtype, len, check: false }
    }

    pub(super) fn fill_op(&'static self, device: DeviceId, dtype: DType, len: usize, value: Scalar) -> Result<Buffer> {
        self.launch(
            Self::simple("fill", device, dtype, len),
            &[],
            Box::new(move |_, out| {
                with_dtype!(dtype, T => typed_mut::<T>(out).fill(T::from_scalar(value)));
                Ok(())
            }),
        )
    }

    pub(super) fn arange_op(
        &'static self,
        device: DeviceId,
        dtype: DType,
        len: usize,
        start: f64,
        step: f64,
    ) -> Result<Buffer> {
        self.launch(
            Self::simple("arange", device, dtype, len),
            &[],
            Box::new(move |_, out| {
                with_dtype!(dtype, T => k::arange(typed_mut::<T>(out), start, step));
                Ok(())
            }),
        )
    }

    pub(super) fn rand_op(&'static self, device: DeviceId, dtype: DType, len: usize, seed: u64) -> Result<Buffer> {
        float_only("rand", dtype)?;
        self.launch(
            Self::simple("rand", device, dtype, len),
            &[],
            Box::new(move |_, out| {
                match dtype {
                    DType::F64 => k::rand(typed_mut::<f64>(out), seed),
                    _ => k::rand(typed_mut::<f32>(out), seed),
                }
                Ok(())
            }),
        )
    }

    pub(super) fn unary_op(
        &'static self,
        device: DeviceId,
        op: UnaryOp,
        dtype: DType,
        x: &Buffer,
        len: usize,
    ) -> Result<Buffer> {
        if !matches!(op, UnaryOp::Neg | UnaryOp::Relu | UnaryOp::Abs | UnaryOp::Square) {
            float_only(op.name(), dtype)?;
        }
        self.launch(
            Self::simple(op.name(), device, dtype, len),
            &[x],
            Box::new(move |ins, out| {
                match dtype {
                    DType::F32 => k::unary_float::<f32>(op, typed(ins[0]), typed_mut(out)),
                    DType::F64 => k::unary_float::<f64>(op, typed(ins[0]), typed_mut(out)),
                    _ => with_dtype!(dtype, T => k::unary::<T>(op, typed(ins[0]), typed_mut(out))),
                }
                Ok(())
            }),
        )
    }

    /// `lhs op rhs` elementwise into an `out_shape` result, the operands lined up by
    /// `layout` (a scalar operand is a one-element buffer).
    pub(super) fn binary_op(
        &'static self,
        device: DeviceId,
        op: BinaryOp,
        dtype: DType,
        operands: [&Buffer; 2],
        out_shape: &[usize],
        layout: &Layout,
    ) -> Result<Buffer> {
        let len = out_shape.iter().product();
        let check = op == BinaryOp::Div && !dtype.is_float();
        let (shape, layout) = (out_shape.to_vec(), layout.clone());
        self.launch(
            Launch { op: op.name(), device, dtype, len, check },
            &operands,
            Box::new(move |ins, out| {
                with_dtype!(dtype, T => k::binary::<T>(op, typed(ins[0]), typed(ins[1]), typed_mut(out), &shape, &layout))
            }),
        )
    }

    /// `x[i] op value` (or `value op x[i]` when `scalar_left`) for the `len` elements of `x`.
    pub(super) fn binary_scalar_op(
        &'static self,
        device: DeviceId,
        op: BinaryOp,
        dtype: DType,
        x: (&Buffer, usize),
        value: Scalar,
        scalar_left: bool,
    ) -> Result<Buffer> {
        let (x, len) = x;
        let check = op == BinaryOp::Div && !dtype.is_float();
        self.launch(
            Launch { op: op.name(), device, dtype, len, check },
            &[x],
            Box::new(move |ins, out| {
                with_dtype!(dtype, T => {
                    let v = [T::from_scalar(value)];
                    let x = typed::<T>(ins[0]);
                    if scalar_left {
                        k::binary::<T>(op, &v, x, typed_mut(out), &[len], &Layout::LhsScalar)
                    } else {
                        k::binary::<T>(op, x, &v, typed_mut(out), &[len], &Layout::RhsScalar)
                    }
                })
            }),
        )
    }

    pub(super) fn unary_param_op(
        &'static self,
        device: DeviceId,
        op: ParamOp,
        dtype: DType,
        x: &Buffer,
        len: usize,
    ) -> Result<Buffer> {
        let name = match op {
            ParamOp::Pow(_) => "pow",
            ParamOp::Clamp(..) => "clamp",
        };
        if let ParamOp::Pow(_) = op {
            float_only("pow", dtype)?;
        }
        self.launch(
            Self::simple(name, device, dtype, len),
            &[x],
            Box::new(move |ins, out| {
                match (op, dtype) {
                    (ParamOp::Pow(e), DType::F64) => k::pow::<f64>(typed(ins[0]), f64::from_scalar(e), typed_mut(out)),
                    (ParamOp::Pow(e), _) => k::pow::<f32>(typed(ins[0]), f32::from_scalar(e), typed_mut(out)),
                    (ParamOp::Clamp(lo, hi), _) => with_dtype!(dtype, T => k::clamp::<T>(
                        typed(ins[0]),
                        T::from_scalar(lo),
                        T::from_scalar(hi),
                        typed_mut(out),
                    )),
                }
                Ok(())
            }),
        )
    }

    pub(super) fn reduce_op(
        &'static self,
        device: DeviceId,
        op: ReduceOp,
        dtype: DType,
        x: &Buffer,
        r: Reduction,
    ) -> Result<Buffer> {
        if op == ReduceOp::Mean {
            float_only("mean", dtype)?;
        }
        let name = match op {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
        };
        self.launch(
            Self::simple(name, device, dtype, r.out_len()),
            &[x],
            Box::new(move |ins, out| {
                with_dtype!(dtype, T => k::reduce::<T>(op, typed(ins[0]), typed_mut(out), r));
                Ok(())
            }),
        )
    }

    /// `[m, k] x [k, n]`, row-major.
    pub(super) fn matmul_op(
        &'static self,
        device: DeviceId,
        dtype: DType,
        ab: [&Buffer; 2],
        mkn: [usize; 3],
    ) -> Result<Buffer> {
        let [m, kk, n] = mkn;
        self.launch(
            Self::simple("matmul", device, dtype, m * n),
            &ab,
            Box::new(move |ins, out| {
                with_dtype!(dtype, T => k::matmul::<T>(typed(ins[0]), typed(ins[1]), typed_mut(out), m, kk, n));
                Ok(())
            }),
        )
    }

    pub(super) fn transpose_op(
        &'static self,
        device: DeviceId,
        dtype: DType,
        x: &Buffer,
        rows: usize,
        cols: usize,
    ) -> Result<Buffer> {
        self.launch(
            Self::simple("transpose", device, dtype, rows * cols),
            &[x],
            Box::new(move |ins, out| {
                with_dtype!(dtype, T => k::transpose::<T>(typed(ins[0]), typed_mut(out), rows, cols));
                Ok(())
            }),
        )
    }

    pub(super) fn concat_op(
        &'static self,
        device: DeviceId,
        dtype: DType,
        parts: &[(&Buffer, usize)],
    ) -> Result<Buffer> {
        let len = parts.iter().map(|p| p.1).sum();
        let size = dtype.size();
        let lens: Vec<usize> = parts.iter().map(|p| p.1 * size).collect();
        let bufs: Vec<&Buffer> = parts.iter().map(|p| p.0).collect();
        self.launch(
            Self::simple("concat", device, dtype, len),
            &bufs,
            Box::new(move |ins, out| {
                let mut at = 0;
                for (src, n) in ins.iter().zip(lens) {
                    out[at..at + n].copy_from_slice(&src[..n]);
                    at += n;
                }
                Ok(())
            }),
        )
    }

    pub(super) fn slice_op(
        &'static self,
        device: DeviceId,
        dtype: DType,
        x: &Buffer,
        offset: usize,
        len: usize,
    ) -> Result<Buffer> {
        let s = dtype.size();
        self.launch(
            Self::simple("slice", device, dtype, len),
            &[x],
            Box::new(move |ins, out| {
                out.copy_from_slice(&ins[0][offset * s..(offset + len) * s]);
                Ok(())
            }),
        )
    }

    pub(super) fn copy_blocks_op(
        &'static self,
        device: DeviceId,
        dtype: DType,
        len: usize,
        parts: &[Blocks<'_>],
    ) -> Result<Buffer> {
        let geometry: Vec<Geometry> = parts.iter().map(Geometry::of).collect();
        let srcs: Vec<&Buffer> = parts.iter().map(|b| b.src).collect();
        let size = dtype.size();
        self.launch(
            Self::simple("copy_blocks", device, dtype, len),
            &srcs,
            Box::new(move |ins, out| {
                for (src, g) in ins.iter().zip(&geometry) {
                    k::copy_blocks(out, src, size, g);
                }
                Ok(())
            }),
        )
    }
}
