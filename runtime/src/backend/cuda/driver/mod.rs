//! The driver layer of the cuda backend: devices and their contexts, device memory,
//! streams, events, graphs, the one kernel launch, device-side checks and user kernels.
//! Everything else in `cuda/` builds on these; nothing here imports `ops/`,
//! `transfer/` or `comm/`.

pub(in crate::backend::cuda) mod args;
pub(in crate::backend::cuda) mod buffer;
pub(in crate::backend::cuda) mod device;
pub(in crate::backend::cuda) mod event;
pub(in crate::backend::cuda) mod flag;
pub(in crate::backend::cuda) mod graph;
pub(in crate::backend::cuda) mod launch;
pub(in crate::backend::cuda) mod memory;
pub(in crate::backend::cuda) mod stream;
pub(in crate::backend::cuda) mod timing;
pub(in crate::backend::cuda) mod user_kernel;
