//! The contract between the runtime and a backend: the two traits, the ops as values,
//! and the descriptions of user kernels, permutations, LayerNorm and matmul precision
//! they take.
//! Nothing here runs work; both backends implement it.

pub(crate) mod errors;
pub(crate) mod fence;
pub(crate) mod gemm;
pub(crate) mod norm;
pub(crate) mod op;
pub(crate) mod permute;
pub(crate) mod precision;
pub(crate) mod rand;
pub(crate) mod release;
pub(crate) mod traits;
pub(crate) mod user_kernel;
