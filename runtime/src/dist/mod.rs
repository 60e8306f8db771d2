//! Several processes, one per device, on one or several machines (PyTorch's
//! `torch.distributed`): how a process learns its place in the job (the launch), how the
//! processes meet (a key-value [`Store`]), and the collectives between them.
//!
//! On the cuda backend the collectives of a group's device run on NCCL; see docs/DESIGN.md §6b.

mod bucket;
mod ddp;
mod group;
mod init;
mod launch;
mod store;
mod work;

pub use bucket::{all_reduce_avg_bucketed, DEFAULT_BUCKET_BYTES};
pub use ddp::{BackwardStats, DistributedDataParallel};
pub use group::{ProcessGroup, ReduceOp};
pub use init::{init, init_with, Dist, DEFAULT_TIMEOUT};
pub use launch::{Launch, LaunchBuilder, DEFAULT_MASTER_PORT};
pub use store::{FileStore, TcpStore};
pub use work::Work;

use crate::error::Result;

/// The key-value operations processes meet through (PyTorch's `c10d::Store`): set and
/// get bytes by key, wait for keys, count with `add`. Every blocking call gives up with an
/// `Err` after the store's timeout, never hangs.
pub trait Store: Send + Sync {
    /// Sets `key` to `value` (replacing any value).
    fn set(&self, key: &str, value: &[u8]) -> Result<()>;
    /// The value of `key`, waiting until some process sets it.
    fn get(&self, key: &str) -> Result<Vec<u8>>;
    /// Adds `amount` to the counter at `key` (0 when unset) and returns the new value.
    fn add(&self, key: &str, amount: i64) -> Result<i64>;
    /// Waits until every key in `keys` is set.
    fn wait(&self, keys: &[&str]) -> Result<()>;
}
