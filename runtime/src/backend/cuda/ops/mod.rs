//! The built-in compute ops of the cuda backend, one kernel source of `locus-kernels`
//! each (`init`, `elementwise`, `reduce`, `matrix`, `softmax`, `gather`, `select`), plus
//! matrix products (`gemm`: cuBLAS and the integer kernel), permutations of dims and
//! LayerNorm (`layer_norm`, kernels of softmax.cu).

pub(in crate::backend::cuda) mod elementwise;
pub(in crate::backend::cuda) mod gather;
pub(in crate::backend::cuda) mod gemm;
pub(in crate::backend::cuda) mod init;
pub(in crate::backend::cuda) mod layer_norm;
pub(in crate::backend::cuda) mod matrix;
pub(in crate::backend::cuda) mod permute;
pub(in crate::backend::cuda) mod reduce;
pub(in crate::backend::cuda) mod select;
pub(in crate::backend::cuda) mod softmax;
