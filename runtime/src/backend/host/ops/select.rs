//! The host backend's comparisons, `where`, `argmax` and `index_select`: each a job through
//! [`launch`] running a loop of `kernels::select` (`kernels::gather` for `index_select`).
//! `argmax` with values is two jobs on the stream, the indices, then the elements at them.

use half::{bf16, f16};

use super::softmax::float_kernel;
use crate::backend::host::buffer::HostBuffer;
use crate::backend::host::kernels::{gather, select};
use crate::backend::host::launch::{launch, typed, typed_mut, Launch};
use crate::backend::sync::capture::Indexed;
use crate::backend::{CompareOp, Gather};
use crate::element::{with_dtype, DType, Element, Scalar};
use crate::error::Result;
use crate::shape::{Layout, Reduction};

/// `lhs op rhs` as `u8` 1 or 0 into an `out_shape` result.
pub(in crate::backend::host) fn compare(
    lhs: &HostBuffer,
    rhs: &HostBuffer,
    op: CompareOp,
    dtype: DType,
    out_shape: &[usize],
    layout: &Layout,
) -> Result<HostBuffer> {
    let len = out_shape.iter().product();
    let (shape, layout) = (out_shape.to_vec(), layout.clone());
    launch(
        Launch::new(op.name(), lhs.account, DType::U8, len),
        &[lhs, rhs],
        Box::new(
            move |ins, out| with_dtype!(dtype, T => select::compare::<T>(op, typed(ins[0]), typed(ins[1]), out, &shape, &layout)),
        ),
    )
}

/// `x[i] op value` as `u8` 1 or 0 for the `len` elements.
pub(in crate::backend::host) fn compare_scalar(
    x: &HostBuffer,
    op: CompareOp,
    dtype: DType,
    len: usize,
    value: Scalar,
) -> Result<HostBuffer> {
    launch(
        Launch::new(op.name(), x.account, DType::U8, len),
        &[x],
        Box::new(move |ins, out| {
            with_dtype!(dtype, T => select::compare::<T>(
                op,
                typed(ins[0]),
                &[T::from_scalar(value)],
                out,
                &[len],
                &Layout::RhsScalar,
            ))
        }),
    )
}

/// `a` where the `u8` `mask` is not 0, else `b`, into an `out_shape` result.
pub(in crate::backend::host) fn select_where(
    mask: &HostBuffer,
    a: &HostBuffer,
    b: &HostBuffer,
    dtype: DType,
    out_shape: &[usize],
    strides: [&[usize]; 3],
) -> Result<HostBuffer> {
    let len = out_shape.iter().product();
    let shape = out_shape.to_vec();
    let strides = strides.map(<[usize]>::to_vec);
    launch(
        Launch::new("where", mask.account, dtype, len),
        &[mask, a, b],
        Box::new(move |ins, out| {
            with_dtype!(dtype, T => select::select_where::<T>(
                ins[0],
                typed(ins[1]),
                typed(ins[2]),
                typed_mut(out),
                &shape,
                &strides,
            ))
        }),
    )
}

/// The index of the first maximum over the dim `r` describes, and with `values` the
/// element there.
pub(in crate::backend::host) fn argmax(
    x: &HostBuffer,
    dtype: DType,
    r: Reduction,
    values: bool,
) -> Result<(HostBuffer, Option<HostBuffer>)> {
    let idx = launch(
        Launch::new("argmax", x.account, DType::I32, r.out_len()),
        &[x],
        Box::new(move |ins, out| with_dtype!(dtype, T => select::argmax::<T>(typed(ins[0]), typed_mut(out), r))),
    )?;
    if !values {
        return Ok((idx, None));
    }
    let vals = launch(
        Launch::new("max_dim", x.account, dtype, r.out_len()),
        &[x, &idx],
        Box::new(
            move |ins, out| with_dtype!(dtype, T => select::gather_along::<T>(typed(ins[0]), typed(ins[1]), typed_mut(out), r)),
        ),
    )?;
    Ok((idx, Some(vals)))
}

/// The gradient of [`index_select`]: `grad` added into the rows `index` picked, in the
/// order of the list (float types).
pub(in crate::backend::host) fn index_add(
    grad: &HostBuffer,
    index: &HostBuffer,
    dtype: DType,
    g: Gather,
) -> Result<HostBuffer> {
    let f = float_kernel("index_select", dtype, [add_of::<f32>, add_of::<f64>, add_of::<bf16>, add_of::<f16>])?;
    launch(
        grad.op("index_select", dtype, g.outer * g.size * g.inner),
        &[grad, index],
        Box::new(move |ins, out| f(ins[0], typed(ins[1]), out, g)),
    )
}

/// [`gather::index_add`] over buffers of `T`.
fn add_of<T: Element>(grad: &[u8], index: &[i32], out: &mut [u8], g: Gather) -> Result<()> {
    gather::index_add::<T>(typed(grad), index, typed_mut(out), g)
}

/// The rows `index` picks along the middle dim of `g` (every index checked first).
pub(in crate::backend::host) fn index_select(
    x: &HostBuffer,
    index: &HostBuffer,
    dtype: DType,
    g: Gather,
) -> Result<HostBuffer> {
    let size = dtype.size();
    launch(
        Launch { check: true, indices: Some((g.count, Indexed::Rows(g))), ..x.op("index_select", dtype, g.out_len()) },
        &[x, index],
        Box::new(move |ins, out| gather::index_select(ins[0], typed(ins[1]), out, size, g)),
    )
}
