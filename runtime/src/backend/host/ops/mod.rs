//! Host ops as jobs on the stream, where they need more than one loop or a check before
//! anything is queued (the loops themselves are `host/kernels/`, as the cuda backend's
//! launches are `cuda/ops/` and its kernels `kernels/cuda/*.cu`): comparisons, `where`
//! and `argmax` (`select`), softmax and cross-entropy (`softmax`), LayerNorm and its
//! gradients (`layer_norm`), an activation's gradient (`activation`).

pub(in crate::backend::host) mod activation;
pub(in crate::backend::host) mod layer_norm;
pub(in crate::backend::host) mod select;
pub(in crate::backend::host) mod softmax;
