//! # locus — typed GPU device placement
//!
//! Device ids live in types: `Tensor<Cuda<1>>`, `Tensor<Cpu>`, `Tensor<Pinned>`. An op
//! that mixes two GPUs, or a GPU and the host, does not compile; explicit copies
//! (`.to::<Cuda<0>>()`) are the one way across. `Tensor<Dyn>` checks placements at run
//! time instead.
//!
//! ```
//! use locus::{Cuda, Tensor};
//! # if !locus::testing::needs_devices(2)? { return Ok(()); }
//! let a = Tensor::<Cuda<0>>::ones([2, 2])?;
//! let b = Tensor::<Cuda<1>>::full([2, 2], 3.0)?;
//! let c = (&a + &b.to::<Cuda<0>>()?)?;
//! assert_eq!(c.to_vec()?, vec![4.0; 4]);
//! # Ok::<(), locus::Error>(())
//! ```
//!
//! A fn, a method or an `impl` block runs with a device current (PyTorch's
//! `torch.cuda.device`) under [`on_device`]; [`with_device!`] does the same for a block
//! or a closure, and `#[derive(ToDevice)]` moves a whole model:
//!
//! ```
//! use locus::{current_device, on_device, DeviceId, Dyn, Tensor};
//!
//! #[on_device(0)]
//! fn step(x: &Tensor<Here>) -> locus::Result<Tensor<Here>> {
//!     // Factories of run-time placed tensors follow the current device.
//!     let noise = Tensor::<Dyn>::rand_current(x.shape(), 0)?;
//!     assert_eq!(noise.device(), DeviceId::Cuda(0));
//!     x + &noise
//! }
//!
//! let y = step(&Tensor::ones([2])?)?;
//! assert_eq!(y.device(), DeviceId::Cuda(0));
//! assert_eq!(current_device(), DeviceId::Cpu);
//! # Ok::<(), locus::Error>(())
//! ```
//!
//! Without a GPU, locus runs on its host backend, which simulates `LOCUS_HOST_DEVICES`
//! (default 2) CUDA devices in host memory; `LOCUS_BACKEND=host|cuda|auto` chooses.

pub use locus_macros::{kernel, on_device, with_device, Parameters, ToDevice};
pub use locus_runtime::*;

#[doc(hidden)]
pub use locus_runtime::__private;
#[doc(hidden)]
pub use locus_runtime::{testing, tuning};
