//! [`BackendStorage`] for [`CudaBuffer`]: a buffer knows its device (its
//! `DeviceState`), so each op runs there, delegating to the module of its kernel source
//! (`elementwise`, `reduce`, `matrix`, `softmax`, `gather`) or to `transfer`.

use std::sync::Arc;

use crate::backend::cuda::driver::buffer::CudaBuffer;
use crate::backend::cuda::driver::device::DeviceState;
use crate::backend::cuda::ops::{elementwise, gather, gemm, layer_norm, matrix, permute, reduce, select, softmax};
use crate::backend::cuda::transfer;
use crate::backend::cuda::{CudaEvent, CudaStream};
use crate::backend::{
    BackendStorage, BinaryOp, Blocks, CompareOp, Gather, Gemm, HostBuffer, Norm, NormGrads, ParamOp, Permute,
    ReduceKind, SoftmaxOp, UnaryOp,
};
use crate::device_id::DeviceId;
use crate::element::{DType, Scalar};
use crate::error::{Error, Result};
use crate::shape::{Layout, Reduction};

/// The device of the first of `parts`, where a concatenation of them goes.
fn first_device(op: &'static str, first: Option<&CudaBuffer>) -> Result<&'static DeviceState> {
    first.map(CudaBuffer::device).ok_or_else(|| Error::InvalidArgument { op, reason: "no buffers to read".into() })
}

impl BackendStorage for CudaBuffer {
    type Stream = Arc<CudaStream>;
    type Event = Arc<CudaEvent>;
    type Pinned = HostBuffer;

    fn device_id(&self) -> DeviceId {
        self.device().id()
    }

    fn download(&self, out: &mut [std::mem::MaybeUninit<u8>]) -> Result<()> {
        transfer::download(self, out)
    }

    fn download_async(&self, dst: &mut HostBuffer, stream: &Arc<CudaStream>) -> Result<Arc<CudaEvent>> {
        transfer::download_async(self, dst, stream)
    }

    fn use_on_stream(&self, stream: &Arc<CudaStream>) -> Result<()> {
        let s = stream;
        self.device().bind()?;
        self.use_on(s)
    }

    fn before_write(&self, stream: &Arc<CudaStream>) -> Result<()> {
        let s = stream;
        self.device().bind()?;
        CudaBuffer::before_write(self, s)
    }

    fn after_write(&self, stream: &Arc<CudaStream>) -> Result<()> {
        let s = stream;
        self.device().bind()?;
        CudaBuffer::after_write(self, s)
    }

    fn lend(&self, stream: &Arc<CudaStream>, write: bool) -> Result<u64> {
        let s = stream;
        if s.ordinal != self.device().ordinal {
            return Err(Error::DeviceMismatch {
                op: "raw view",
                lhs: self.device_id(),
                rhs: DeviceId::Cuda(s.ordinal),
            });
        }
        self.device().bind()?;
        // A reader: `s` waits for the last write, and the free waits for `s`.
        self.use_on(s)?;
        if write {
            // A writer also waits for every read since the last write, and is the writer
            // from now on, whether or not the view's end is marked.
            CudaBuffer::before_write(self, s)?;
            self.claim_writer(s);
        }
        Ok(self.ptr())
    }

    fn overwrite(&self, src: &Self) -> Result<()> {
        transfer::overwrite(self, src)
    }

    fn forget_captured_writes(&self) {
        CudaBuffer::forget_captured_writes(self)
    }

    fn unary(&self, op: UnaryOp, dtype: DType, len: usize) -> Result<Self> {
        elementwise::unary(self, op, dtype, len)
    }

    fn activation_grad(&self, grad: &Self, op: UnaryOp, dtype: DType, len: usize) -> Result<Self> {
        elementwise::activation_grad(self, grad, op, dtype, len)
    }

    fn cast(&self, from: DType, to: DType, len: usize) -> Result<Self> {
        elementwise::cast(self, from, to, len)
    }

    fn unary_param(&self, op: ParamOp, dtype: DType, len: usize) -> Result<Self> {
        elementwise::unary_param(self, op, dtype, len)
    }

    fn binary(&self, rhs: &Self, op: BinaryOp, dtype: DType, out_shape: &[usize], layout: &Layout) -> Result<Self> {
        elementwise::binary(self, rhs, op, dtype, out_shape, layout)
    }

    fn binary_scalar(&self, op: BinaryOp, dtype: DType, len: usize, rhs: Scalar) -> Result<Self> {
        elementwise::binary_scalar(self, op, dtype, len, rhs)
    }

    fn scalar_binary(&self, op: BinaryOp, dtype: DType, lhs: Scalar, len: usize) -> Result<Self> {
        elementwise::scalar_binary(lhs, self, op, dtype, len)
    }

    fn reduce(&self, op: ReduceKind, dtype: DType, r: Reduction) -> Result<Self> {
        reduce::reduce(self, op, dtype, r)
    }

    fn matmul(&self, rhs: &Self, dtype: DType, g: Gemm) -> Result<Self> {
        gemm::matmul(self, rhs, dtype, g)
    }

    fn transpose(&self, dtype: DType, rows: usize, cols: usize) -> Result<Self> {
        matrix::transpose(self, dtype, rows, cols)
    }

    fn permute(&self, dtype: DType, p: &Permute) -> Result<Self> {
        permute::permute(self, dtype, p)
    }

    fn slice(&self, dtype: DType, offset: usize, len: usize) -> Result<Self> {
        matrix::slice(self, dtype, offset, len)
    }

    fn concat(dtype: DType, parts: &[(&Self, usize)]) -> Result<Self> {
        let dev = first_device("concat", parts.first().map(|p| p.0))?;
        matrix::concat(dev, dtype, parts)
    }

    fn copy_blocks(&self, dtype: DType, len: usize, parts: &[Blocks<'_, Self>]) -> Result<Self> {
        matrix::copy_blocks(self.device(), dtype, len, parts)
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
        gather::index_select(self, index, dtype, g)
    }

    fn index_add(&self, index: &Self, dtype: DType, g: Gather) -> Result<Self> {
        gather::index_add(self, index, dtype, g)
    }

    fn cross_entropy_rows(&self, targets: &Self, dtype: DType, rows: usize, classes: usize) -> Result<Self> {
        softmax::cross_entropy_rows(self, targets, dtype, rows, classes)
    }

    fn cross_entropy_back(
        &self,
        targets: &Self,
        grad: &Self,
        dtype: DType,
        rows: usize,
        classes: usize,
    ) -> Result<Self> {
        softmax::cross_entropy_back(self, targets, grad, dtype, (rows, classes))
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
        self.ptr()
    }

    fn check_indices(&self, limits: &[(usize, usize)]) -> Result<Option<(usize, usize, i32)>> {
        crate::backend::cuda::driver::flag::check_source(self, limits)
    }
}
