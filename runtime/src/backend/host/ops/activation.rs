//! The gradient of an activation as one job (gelu, gelu_tanh): `g · op'(x)`, where the
//! composed ops took about ten.

use half::{bf16, f16};

use super::softmax::float_kernel;
use crate::backend::host::buffer::HostBuffer;
use crate::backend::host::kernels::elementwise;
use crate::backend::host::launch::{launch, typed, typed_mut};
use crate::backend::UnaryOp;
use crate::element::{DType, Float};
use crate::error::Result;

/// `grad[i] · op'(x[i])` for the `len` elements of `x` and `grad`.
pub(in crate::backend::host) fn activation_grad(
    x: &HostBuffer,
    grad: &HostBuffer,
    op: UnaryOp,
    dtype: DType,
    len: usize,
) -> Result<HostBuffer> {
    let name = op.grad_name()?;
    type Kernel = fn(UnaryOp, &[u8], &[u8], &mut [u8]) -> Result<()>;
    let kernels: [Kernel; 4] = [grad_of::<f32>, grad_of::<f64>, grad_of::<bf16>, grad_of::<f16>];
    let f = float_kernel(name, dtype, kernels)?;
    launch(x.op(name, dtype, len), &[x, grad], Box::new(move |ins, out| f(op, ins[0], ins[1], out)))
}

fn grad_of<T: Float>(op: UnaryOp, x: &[u8], g: &[u8], out: &mut [u8]) -> Result<()> {
    elementwise::activation_grad::<T>(op, typed(x), typed(g), typed_mut(out))
}
