//! The runtime of [locus](https://docs.rs/locus): placements, tensors, ops and the
//! host and cuda backends. Use it through the `locus` facade crate.
//!
//! ```
//! # extern crate locus_runtime as locus;
//! use locus::{Cuda, Tensor};
//! let x = Tensor::<Cuda<0>>::rand([4, 3], 0)?;
//! let w = Tensor::<Cuda<0>>::ones([3, 2])?;
//! let y = x.matmul(&w)?.relu()?;
//! assert_eq!(y.shape(), &[4, 2]);
//! # Ok::<(), locus::Error>(())
//! ```

// Every `unsafe` block says why it is sound (`// SAFETY:`), every `unsafe fn` says what
// its caller must uphold (`# Safety`), and the body of an `unsafe fn` is not an implicit
// unsafe block (the 2024 edition's default).
#![deny(clippy::undocumented_unsafe_blocks, clippy::missing_safety_doc, unsafe_op_in_unsafe_fn)]
// Every public item is documented, and `pub` means reachable from outside the crate.
#![warn(missing_docs, unreachable_pub)]

// Layers, bottom up. A module may import from its own layer and the ones below it.
//
// - foundation: `error` (Error, Result), `element` (element types), `shape` (checked
//   shapes and layouts), `device_id` (DeviceId, re-exported by `device`), `trace` (the
//   trace-event recorder, `range!`), `nvtx` (NVTX ranges for a profiler's injection).
// - backend: `backend` and everything under it, one folder per layer (docs/DESIGN.md's
//   backend map): the contract (`api/`: the `BackendDevice` and `BackendStorage` traits
//   with their associated types, the f32 matmul precision), the worker pool, the
//   current-stream stores, ordering books, hazard checker and capture rules (`sync/`),
//   the pinned pool, the shared copy paths (`transfer/`), the host and cuda
//   implementations, and the enum layer above them (`dispatch/`). It imports only the
//   foundation.
// - placement and memory: `device` (placements), `role` (roles bound to devices at
//   start-up, `Local`), `placement` (the compile-time checks),
//   `storage` (a buffer with its device and type), `memory` (statistics), `tuning` (the
//   copy paths' knobs, for the GPU bench), `testing` (device-count skips for tests).
// - tensors and streams: `tensor` (ops, factories, conversions), `autograd` (the tape,
//   `Param`, backward, no_grad), `stream` (Stream,
//   Event, on_stream), `copy` (pin_memory, async copies, Pending), `unwaited`
//   (diagnostics for reading a Pending), `guard` (the current device), `to_device`,
//   `graph` (captured graphs and their replays), `raw` (tensors lent to and taken from
//   code written against cudarc or raw CUDA).
// - on top: `nn` (blocks of models and their named parameters), `optim` (optimizers,
//   gradient clipping, learning-rate schedules), `loader`, `parallel` (peer access,
//   collectives, DataParallel), `checkpoint`
//   (safetensors files loaded to and saved from any placement), `dist`
//   (several processes: launch, store, process groups), `kernel` (launches of the user's
//   `#[locus::kernel]` fns), `macro_support` (what the macros expand to).
//
// docs/DESIGN.md has the same map as a table (and the backend's own map), which
// tests/suite/layers.rs checks against every `crate::` import. Known exception, left for the
// backend rebuild: `storage`/`copy` take host memory (`Buffer::as_host`, the host
// backend's `alloc_for_overwrite`) for copies from and into host placements.
mod autograd;
mod backend;
mod checkpoint;
mod copy;
mod device;
mod device_id;
pub mod dist;
mod element;
#[cfg(test)]
mod env_fuzz;
mod error;
pub mod faults;
mod graph;
mod guard;
mod kernel;
mod loader;
mod macro_support;
pub mod memory;
pub mod nn;
mod nvtx;
pub mod optim;
pub mod parallel;
mod placement;
mod raw;
mod role;
mod shape;
mod storage;
mod stream;
mod tensor;
#[doc(hidden)]
pub mod testing;
mod to_device;
pub mod trace;
#[doc(hidden)]
pub mod tuning;
mod unwaited;

pub use autograd::{autocast, enable_grad, is_grad_enabled, no_grad, GradLeaf, HalfFloat, NoGrad, Param};
pub use backend::api::precision::{
    float32_matmul_precision, set_float32_matmul_precision, with_float32_matmul_precision, MatmulPrecision,
};
pub use backend::host::cache::{host_stats, release_cached_host, HostStats};
pub use backend::pinned_pool::{pinned_stats, release_cached_pinned, PinnedStats};
pub use backend::{backend_name, device_count};
pub use checkpoint::{
    load_safetensors, load_safetensors_on, load_safetensors_with, save_safetensors, save_safetensors_with_metadata,
    AnyTensor, Checkpoint, LoadOptions,
};
pub use copy::{AsyncSource, HostPlacement, Pending, Transfer};
pub use device::{devices, Cpu, Cuda, Device, DeviceId, Dyn, FixedDevice, Here, Pinned, StaticDevice};
pub use element::{DType, Element, Float, IndexElement, SameElement, Scalar};
pub use error::{Error, Result};
pub use graph::{replay_index_checks, Graph, GraphInputs, GraphOutputs, InputMut, Output};
pub use guard::{current_device, DeviceGuard, IntoDeviceId, OnDevice};
/// The 16-bit float element types, from the `half` crate.
pub use half::{bf16, f16};
pub use kernel::{Grid, KernelLaunch};
pub use loader::{Batch, Dataset, Loader, LoaderBuilder};
pub use memory::{max_memory_allocated, memory_allocated, memory_reserved, reset_peak_memory_stats, stream_count};
pub use nn::Parameters;
pub use optim::GraphedStep;
pub use parallel::{can_access_peer, enable_peer_access, DataParallel, Module, PeerAccess};
pub use placement::{PlacedWith, SameEventDevice, SameGraphDevice, SameKernelDevice, SamePlacement, SameStreamDevice};
pub use raw::{RawView, RawViewMut};
pub use role::{bind, bound, Local, Role};
pub use stream::{
    cross_stream_waits, cross_stream_waits_skipped, current_stream, on_stream, synchronize, Event, Stream,
};
pub use tensor::Tensor;
pub use to_device::ToDevice;
pub use unwaited::Waited;

/// Items the macros of `locus-macros` expand to. Not public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::autograd::Param;
    pub use crate::device::{Cuda, Device, DeviceId, StaticDevice};
    pub use crate::error::{Error, Result};
    pub use crate::guard::{DeviceGuard, OnDevice};
    pub use crate::kernel::{HostCall, HostKernel, KernelFallback, KernelLaunch, KernelScalar, KernelSource};
    pub use crate::macro_support::*;
    pub use crate::nn::{join as join_param_name, Parameters};
    pub use crate::placement::SameKernelDevice;
    pub use crate::placement::Unplaced;
    pub use crate::tensor::Tensor;
    pub use crate::to_device::ToDevice;
}
