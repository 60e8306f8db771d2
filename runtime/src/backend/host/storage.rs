//! The host backend's storage-level ops: [`BackendStorage`] for [`HostBuffer`]. A buffer
//! knows its device through its memory account, and each op puts its result on that
//! device through [`launch`] (a job on the current stream of a simulated device, a call
//! on the calling thread for `cpu` and `pinned`).

use std::sync::Arc;

use crate::backend::host::buffer::HostBuffer;
use crate::backend::host::kernels::{self, elementwise, gemm, matrix, reduce, Geometry};
use crate::backend::host::launch::{launch, queue_copy, typed, typed_mut, Launch};
use crate::backend::host::ops::{activation, layer_norm, select, softmax};
use crate::backend::host::streams::{self, current_stream, use_on_stream};
use crate::backend::host::{HostEvent, HostStream};
use crate::backend::transfer::paths::{self, CopyPath};
use crate::backend::Permute;
use crate::backend::{
    float_only, same_length, BackendStorage, BinaryOp, Blocks, CompareOp, Gather, Gemm, Norm, NormGrads, ParamOp,
    ReduceKind, SoftmaxOp, UnaryOp,
};
use crate::device_id::DeviceId;
use crate::element::{with_dtype, DType, Element, Scalar};
use crate::error::{Error, Result};
use crate::shape::{Layout, Reduction};

impl HostBuffer {
    /// An op of `len` elements of `dtype` on this buffer's device, which cannot fail.
    pub(in crate::backend::host) fn op(&self, op: &'static str, dtype: DType, len: usize) -> Launch {
        Launch::new(op, self.account, dtype, len)
    }

    /// `x[i] op value` (or `value op x[i]` when `scalar_left`) for the `len` elements.
    fn with_scalar(&self, op: BinaryOp, dtype: DType, len: usize, value: Scalar, scalar_left: bool) -> Result<Self> {
        let check = op == BinaryOp::Div && !dtype.is_float();
        launch(
            Launch { check, ..self.op(op.name(), dtype, len) },
            &[self],
            Box::new(move |ins, out| {
                with_dtype!(dtype, T => {
                    let v = [T::from_scalar(value)];
                    let x = typed::<T>(ins[0]);
                    if scalar_left {
                        elementwise::binary::<T>(op, &v, x, typed_mut(out), &[len], &Layout::LhsScalar)
                    } else {
                        elementwise::binary::<T>(op, x, &v, typed_mut(out), &[len], &Layout::RhsScalar)
                    }
                })
            }),
        )
    }
}

impl BackendStorage for HostBuffer {
    type Stream = Arc<HostStream>;
    type Event = Arc<HostEvent>;
    type Pinned = HostBuffer;

    fn device_id(&self) -> DeviceId {
        self.account.device
    }

    fn download(&self, out: &mut [std::mem::MaybeUninit<u8>]) -> Result<()> {
        same_length("to_vec", out.len(), self.len())?;
        let device = self.device_id();
        // The sizes the cuda backend downloads inline go the same way here.
        if !device.is_host() && paths::download_path(out.len()) == CopyPath::Inline {
            return crate::backend::host::inline::download(self, out);
        }
        if !device.is_host() {
            // As a device-to-host copy: queued on the current stream, which first waits
            // for the writer, then waited for.
            let s = current_stream(device);
            use_on_stream(self, &s)?;
            s.synchronize()?;
            crate::faults::check(crate::faults::Point::Copy, device, "download")?;
        }
        kernels::copy_into(out, self.bytes())
    }

    fn download_async(&self, dst: &mut HostBuffer, stream: &Arc<HostStream>) -> Result<Arc<HostEvent>> {
        same_length("to_pinned_async", dst.len(), self.len())?;
        // The source's writer comes first on the stream; dispatch holds `dst` until
        // the copy is done.
        use_on_stream(self, stream)?;
        queue_copy(stream, "download_async", self, dst)
    }

    fn use_on_stream(&self, stream: &Arc<HostStream>) -> Result<()> {
        use_on_stream(self, stream)
    }

    fn before_write(&self, stream: &Arc<HostStream>) -> Result<()> {
        streams::before_write(self, stream)
    }

    fn after_write(&self, stream: &Arc<HostStream>) -> Result<()> {
        streams::after_write(self, stream);
        Ok(())
    }

    fn overwrite(&self, src: &Self) -> Result<()> {
        same_length("copy_from", src.len(), self.len())?;
        let device = self.device_id();
        if src.device_id() != device {
            return Err(Error::DeviceMismatch { op: "copy_from", lhs: device, rhs: src.device_id() });
        }
        if device.is_host() {
            return Err(Error::InvalidArgument {
                op: "copy_from",
                reason: "host memory is written in place with `as_mut_slice`".into(),
            });
        }
        let s = current_stream(device);
        use_on_stream(src, &s)?;
        streams::before_write(self, &s)?;
        queue_copy(&s, "copy_from", src, self)?;
        streams::after_write(self, &s);
        Ok(())
    }

    fn lend(&self, stream: &Arc<HostStream>, write: bool) -> Result<u64> {
        let s = stream;
        if s.device != self.device_id() {
            return Err(Error::DeviceMismatch { op: "raw view", lhs: self.device_id(), rhs: s.device });
        }
        use_on_stream(self, s)?;
        if write {
            streams::before_write(self, s)?;
        }
        // Host code stands for the stream's work: it may start once the stream is idle.
        s.synchronize()?;
        self.host_access(write);
        if write {
            // The stream is the writer from now on, whether or not the view's end is
            // marked (a forgotten view).
            streams::after_write(self, s);
        }
        Ok(self.addr() as u64)
    }

    fn forget_captured_writes(&self) {
        streams::forget_captured_writes(self)
    }

    fn unary(&self, op: UnaryOp, dtype: DType, len: usize) -> Result<Self> {
        if !matches!(op, UnaryOp::Neg | UnaryOp::Relu | UnaryOp::Abs | UnaryOp::Square) {
            float_only(op.name(), dtype)?;
        }
        launch(
            self.op(op.name(), dtype, len),
            &[self],
            Box::new(move |ins, out| match dtype {
                DType::F32 => elementwise::unary_float::<f32>(op, typed(ins[0]), typed_mut(out)),
                DType::F64 => elementwise::unary_float::<f64>(op, typed(ins[0]), typed_mut(out)),
                DType::BF16 => elementwise::unary_float::<half::bf16>(op, typed(ins[0]), typed_mut(out)),
                DType::F16 => elementwise::unary_float::<half::f16>(op, typed(ins[0]), typed_mut(out)),
                _ => with_dtype!(dtype, T => elementwise::unary::<T>(op, typed(ins[0]), typed_mut(out))),
            }),
        )
    }

    fn activation_grad(&self, grad: &Self, op: UnaryOp, dtype: DType, len: usize) -> Result<Self> {
        activation::activation_grad(self, grad, op, dtype, len)
    }

    fn cast(&self, from: DType, to: DType, len: usize) -> Result<Self> {
        launch(
            self.op("to_dtype", to, len),
            &[self],
            Box::new(
                move |ins, out| with_dtype!(from, F => with_dtype!(to, U => elementwise::cast::<F, U>(typed(ins[0]), typed_mut(out)))),
            ),
        )
    }

    fn unary_param(&self, op: ParamOp, dtype: DType, len: usize) -> Result<Self> {
        let name = match op {
            ParamOp::Pow(_) => "pow",
            ParamOp::Clamp(..) => "clamp",
        };
        if let ParamOp::Pow(_) = op {
            float_only("pow", dtype)?;
        }
        launch(
            self.op(name, dtype, len),
            &[self],
            Box::new(move |ins, out| match (op, dtype) {
                (ParamOp::Pow(e), DType::F64) => {
                    elementwise::pow::<f64>(typed(ins[0]), f64::from_scalar(e), typed_mut(out))
                }
                (ParamOp::Pow(e), DType::BF16) => {
                    elementwise::pow::<half::bf16>(typed(ins[0]), half::bf16::from_scalar(e), typed_mut(out))
                }
                (ParamOp::Pow(e), DType::F16) => {
                    elementwise::pow::<half::f16>(typed(ins[0]), half::f16::from_scalar(e), typed_mut(out))
                }
                (ParamOp::Pow(e), _) => elementwise::pow::<f32>(typed(ins[0]), f32::from_scalar(e), typed_mut(out)),
                (ParamOp::Clamp(lo, hi), _) => with_dtype!(dtype, T => elementwise::clamp::<T>(
                    typed(ins[0]),
                    T::from_scalar(lo),
                    T::from_scalar(hi),
                    typed_mut(out),
                )),
            }),
        )
    }

    fn binary(&self, rhs: &Self, op: BinaryOp, dtype: DType, out_shape: &[usize], layout: &Layout) -> Result<Self> {
        let len = out_shape.iter().product();
        let check = op == BinaryOp::Div && !dtype.is_float();
        let (shape, layout) = (out_shape.to_vec(), layout.clone());
        launch(
            Launch { check, ..self.op(op.name(), dtype, len) },
            &[self, rhs],
            Box::new(
                move |ins, out| with_dtype!(dtype, T => elementwise::binary::<T>(op, typed(ins[0]), typed(ins[1]), typed_mut(out), &shape, &layout)),
            ),
        )
    }

    fn binary_scalar(&self, op: BinaryOp, dtype: DType, len: usize, rhs: Scalar) -> Result<Self> {
        self.with_scalar(op, dtype, len, rhs, false)
    }

    fn scalar_binary(&self, op: BinaryOp, dtype: DType, lhs: Scalar, len: usize) -> Result<Self> {
        self.with_scalar(op, dtype, len, lhs, true)
    }

    fn reduce(&self, op: ReduceKind, dtype: DType, r: Reduction) -> Result<Self> {
        if op.float_only() {
            float_only(op.name(), dtype)?;
        }
        let name = op.name();
        launch(
            self.op(name, dtype, r.out_len()),
            &[self],
            Box::new(
                move |ins, out| with_dtype!(dtype, T => reduce::reduce::<T>(op, typed(ins[0]), typed_mut(out), r)),
            ),
        )
    }

    fn matmul(&self, rhs: &Self, dtype: DType, g: Gemm) -> Result<Self> {
        let Some((_, _, len)) = g.lens() else {
            return Err(Error::InvalidArgument { op: "matmul", reason: format!("{g:?} has too many elements") });
        };
        launch(
            self.op("matmul", dtype, len),
            &[self, rhs],
            Box::new(move |ins, out| match dtype {
                DType::F32 => gemm::matmul_f32(typed(ins[0]), typed(ins[1]), typed_mut(out), g),
                DType::F64 => gemm::matmul_f64(typed(ins[0]), typed(ins[1]), typed_mut(out), g),
                DType::BF16 => gemm::matmul_half::<half::bf16>(typed(ins[0]), typed(ins[1]), typed_mut(out), g),
                DType::F16 => gemm::matmul_half::<half::f16>(typed(ins[0]), typed(ins[1]), typed_mut(out), g),
                _ => with_dtype!(dtype, T => gemm::matmul_int::<T>(typed(ins[0]), typed(ins[1]), typed_mut(out), g)),
            }),
        )
    }

    fn permute(&self, dtype: DType, p: &Permute) -> Result<Self> {
        let len = p.len();
        let p = p.clone();
        launch(
            self.op("transpose", dtype, len),
            &[self],
            Box::new(move |ins, out| with_dtype!(dtype, T => matrix::permute::<T>(typed(ins[0]), typed_mut(out), &p))),
        )
    }

    fn transpose(&self, dtype: DType, rows: usize, cols: usize) -> Result<Self> {
        launch(
            self.op("transpose", dtype, rows * cols),
            &[self],
            Box::new(
                move |ins, out| with_dtype!(dtype, T => matrix::transpose::<T>(typed(ins[0]), typed_mut(out), rows, cols)),
            ),
        )
    }

    fn slice(&self, dtype: DType, offset: usize, len: usize) -> Result<Self> {
        let s = dtype.size();
        launch(
            self.op("slice", dtype, len),
            &[self],
            Box::new(move |ins, out| kernels::copy(out, &ins[0][offset * s..(offset + len) * s])),
        )
    }

    fn concat(dtype: DType, parts: &[(&Self, usize)]) -> Result<Self> {
        // The first part's device: where the concatenation goes.
        let no_parts = || Error::InvalidArgument { op: "concat", reason: "no buffers to read".into() };
        let into = parts.first().ok_or_else(no_parts)?.0;
        let len = parts.iter().map(|p| p.1).sum();
        let size = dtype.size();
        let lens: Vec<usize> = parts.iter().map(|p| p.1 * size).collect();
        let bufs: Vec<&HostBuffer> = parts.iter().map(|p| p.0).collect();
        launch(
            into.op("concat", dtype, len),
            &bufs,
            Box::new(move |ins, out| {
                let mut at = 0;
                for (src, &n) in ins.iter().zip(&lens) {
                    kernels::copy(&mut out[at..at + n], &src[..n])?;
                    at += n;
                }
                Ok(())
            }),
        )
    }

    fn copy_blocks(&self, dtype: DType, len: usize, parts: &[Blocks<'_, Self>]) -> Result<Self> {
        let geometry: Vec<Geometry> = parts.iter().map(Geometry::of).collect();
        let srcs: Vec<&HostBuffer> = parts.iter().map(|b| b.src).collect();
        let (size, gaps) = (dtype.size(), parts.iter().map(|p| p.count * p.block).sum::<usize>() < len);
        let copy = move |ins: &[&[u8]], out: &mut [u8]| kernels::copy_parts(out, ins, size, &geometry, gaps);
        launch(self.op("copy_blocks", dtype, len), &srcs, Box::new(copy))
    }

    fn softmax(&self, grad: Option<&Self>, op: SoftmaxOp, dtype: DType, r: Reduction) -> Result<Self> {
        softmax::softmax(self, grad, op, dtype, r)
    }

    fn layer_norm(&self, affine: Option<(&Self, &Self)>, dtype: DType, n: Norm) -> Result<Self> {
        layer_norm::forward(self, affine, dtype, n)
    }

    fn layer_norm_back(&self, grad: &Self, weight: Option<&Self>, dtype: DType, n: Norm) -> Result<NormGrads<Self>> {
        layer_norm::backward(self, grad, weight, dtype, n)
    }

    fn index_select(&self, index: &Self, dtype: DType, g: Gather) -> Result<Self> {
        select::index_select(self, index, dtype, g)
    }

    fn index_add(&self, index: &Self, dtype: DType, g: Gather) -> Result<Self> {
        select::index_add(self, index, dtype, g)
    }

    fn cross_entropy_rows(&self, targets: &Self, dtype: DType, n: usize, classes: usize) -> Result<Self> {
        softmax::cross_entropy_rows(self, targets, dtype, n, classes)
    }

    fn cross_entropy_back(&self, targets: &Self, grad: &Self, dtype: DType, n: usize, classes: usize) -> Result<Self> {
        softmax::cross_entropy_back(self, targets, grad, dtype, (n, classes))
    }

    fn compare(&self, rhs: &Self, op: CompareOp, dtype: DType, out_shape: &[usize], layout: &Layout) -> Result<Self> {
        select::compare(self, rhs, op, dtype, out_shape, layout)
    }

    fn compare_scalar(&self, op: CompareOp, dtype: DType, len: usize, rhs: Scalar) -> Result<Self> {
        select::compare_scalar(self, op, dtype, len, rhs)
    }

    fn select_where(
        &self,
        a: &Self,
        b: &Self,
        dtype: DType,
        out_shape: &[usize],
        strides: [&[usize]; 3],
    ) -> Result<Self> {
        select::select_where(self, a, b, dtype, out_shape, strides)
    }

    fn argmax(&self, dtype: DType, r: Reduction, values: bool) -> Result<(Self, Option<Self>)> {
        select::argmax(self, dtype, r, values)
    }

    fn addr(&self) -> u64 {
        HostBuffer::addr(self) as u64
    }

    fn check_indices(&self, limits: &[(usize, usize)]) -> Result<Option<(usize, usize, i32)>> {
        crate::backend::host::graph::check_source(self, limits)
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::host::host;
    use crate::backend::host::launch::fill;
    use crate::backend::host::storage::*;
    use crate::backend::transfer::as_uninit;

    #[test]
    fn a_download_into_host_memory_of_the_wrong_length_is_an_error_on_every_device() {
        for device in [DeviceId::Cpu, DeviceId::Cuda(0)] {
            let x = fill(host().account(device).expect("account"), DType::F32, 4, Scalar::F32(1.0)).expect("fill");
            let mut short = [0u8; 12];
            // SAFETY: a download writes only initialized bytes through the view (its contract).
            let e = x.download(unsafe { as_uninit(&mut short) }).expect_err("12 bytes cannot hold 4 f32");
            assert!(e.to_string().contains("wrong length (12 bytes for 16)"), "{e}");
            let mut right = [0u8; 16];
            // SAFETY: a download writes only initialized bytes through the view (its contract).
            x.download(unsafe { as_uninit(&mut right) }).expect("download");
            assert_eq!(bytemuck::cast_slice::<u8, f32>(&right), &[1.0; 4]);
        }
    }
}
