//! Work over several devices: peer access, collectives, data parallelism.
//!
//! - [`enable_peer_access`] returns a [`PeerAccess`] token, the one way to run an op on
//!   tensors of two GPUs.
//! - [`scatter`], [`broadcast`], [`gather`] and [`reduce_add`] move a batch over a list
//!   of devices and back (`torch.cuda.comm`); [`all_reduce_sum`] and [`all_gather`]
//!   combine one tensor per device (NCCL's collectives, through NCCL on the cuda backend
//!   when it is installed).
//! - [`DataParallel`] runs a [`Module`] over a batch split between devices, one thread
//!   per device.
//!
//! Device lists are typed (a tuple of placements, giving a tuple of typed tensors) or
//! run-time (`DeviceId`s, giving `Tensor<Dyn>`s):
//!
//! ```
//! # extern crate locus_runtime as locus;
//! use locus::parallel::{gather, scatter};
//! use locus::{Cpu, Cuda, DeviceId, Tensor};
//! # if !locus::testing::needs_devices(2)? { return Ok(()); }
//! let batch = Tensor::<Cpu>::rand([7, 3], 1)?;
//! let (a, b) = scatter(&batch, (Cuda::<0>, Cuda::<1>))?;
//! assert_eq!((a.shape()[0], b.shape()[0]), (4, 3));
//! let back = gather(&(a, b), Cpu)?;
//! assert_eq!(back.to_vec()?, batch.to_vec()?);
//!
//! let ids: Vec<DeviceId> = (0..locus::device_count()? as u32).map(DeviceId::Cuda).collect();
//! let parts = scatter(&batch, &ids)?;
//! assert_eq!(parts.len(), ids.len());
//! # Ok::<(), locus::Error>(())
//! ```

mod collective;
mod data_parallel;
mod lists;
mod peer;
mod scatter;

pub use collective::{all_gather, all_reduce_sum, broadcast};
pub use data_parallel::{DataParallel, Module, Replicas, Replicate};
pub use lists::{DeviceList, Parts};
pub use peer::{can_access_peer, enable_peer_access, CudaDevice, PeerAccess};
pub use scatter::{chunk_sizes, gather, reduce_add, scatter, scatter_sizes};
