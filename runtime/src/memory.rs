//! Memory statistics per device, as PyTorch's `torch.cuda.memory_*` give them.

use crate::backend;
use crate::backend::blocks;
use crate::device::DeviceId;
use crate::error::Result;

/// Bytes held by live tensors on `device`: the sum of their sizes as asked for, without
/// any allocator's rounding, on every backend (PyTorch's `memory_allocated` counts
/// rounded blocks instead). Freed memory that locus keeps for reuse is in
/// [`memory_reserved`], not here.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{memory_allocated, Cuda, DeviceId, Tensor};
/// let before = memory_allocated(DeviceId::Cuda(0))?;
/// let t = Tensor::<Cuda<0>>::zeros([1024])?;
/// assert!(memory_allocated(DeviceId::Cuda(0))? >= before + 4096);
/// drop(t);
/// # Ok::<(), locus::Error>(())
/// ```
pub fn memory_allocated(device: DeviceId) -> Result<usize> {
    Ok(backend::for_device(device)?.memory(device)?.0)
}

/// The most bytes held on `device` since the process started or since
/// [`reset_peak_memory_stats`].
pub fn max_memory_allocated(device: DeviceId) -> Result<usize> {
    Ok(backend::for_device(device)?.memory(device)?.1)
}

/// Restarts [`max_memory_allocated`] of `device` from what is held now.
pub fn reset_peak_memory_stats(device: DeviceId) -> Result<()> {
    backend::for_device(device)?.reset_peak(device)
}

/// Bytes locus holds on `device`: [`memory_allocated`] plus freed blocks cached for
/// reuse (PyTorch's `memory_reserved`). A stream's cached blocks go back to the driver
/// when the stream is dropped, so dropping streams keeps this flat.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{memory_allocated, memory_reserved, DeviceId};
/// let d = DeviceId::Cuda(0);
/// assert!(memory_reserved(d)? >= memory_allocated(d)?);
/// # Ok::<(), locus::Error>(())
/// ```
pub fn memory_reserved(device: DeviceId) -> Result<usize> {
    let b = backend::for_device(device)?;
    Ok(b.memory(device)?.0 + b.cached_bytes(device)?)
}

/// How many CUDA streams locus holds now, over all devices: the devices' own, the
/// user's [`Stream`](crate::Stream)s, and those kept alive by memory still ordered on
/// them. On the host backend, its simulated streams: each device's default stream once
/// the device is used, and the user's.
///
/// ```
/// # extern crate locus_runtime as locus;
/// let before = locus::stream_count()?;
/// drop(locus::Stream::<locus::Cuda<0>>::new()?);
/// assert_eq!(locus::stream_count()?, before);
/// # Ok::<(), locus::Error>(())
/// ```
pub fn stream_count() -> Result<usize> {
    Ok(backend::selected()?.live_streams())
}

/// A snapshot of every GPU's memory: each block locus holds (address, size, bytes asked
/// for, stream, allocated or cached for reuse) and, with history recorded
/// ([`record_history`] or `LOCUS_MEMORY_HISTORY=1`), where each was allocated and the
/// events that led here. [`Snapshot::write`] saves it in PyTorch's format, the pickle of
/// `torch.cuda.memory._snapshot()`, which `python -m torch.cuda._memory_viz` and
/// PyTorch's memory viewer (<https://pytorch.org/memory_viz>) open unchanged.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::{memory, Cuda, DeviceId, Tensor};
/// let t = Tensor::<Cuda<0>>::zeros([1 << 20])?; // 4 MiB
/// let snap = memory::snapshot()?;
/// let mine = snap.blocks().into_iter().find(|b| b.requested == 4 << 20).expect("the tensor's block");
/// assert_eq!((mine.device, mine.cached), (DeviceId::Cuda(0), false));
/// let path = std::env::temp_dir().join(format!("locus-doc-snapshot-{}.pickle", std::process::id()));
/// snap.write(&path)?; // python -m torch.cuda._memory_viz trace_plot <path> -o memory.html
/// # std::fs::remove_file(&path).ok();
/// # drop(t);
/// # Ok::<(), locus::Error>(())
/// ```
pub fn snapshot() -> Result<Snapshot> {
    backend::selected()?;
    let books = blocks::read();
    let value = blocks::pickle::snapshot_of(&books);
    Ok(Snapshot { books, value })
}

/// Turns on (or off) the recording of where each block is allocated (a Rust backtrace)
/// and of the event history (allocations, frees, cache returns, out-of-memory, the last
/// 100 000 per device) that [`snapshot`] includes, as PyTorch's
/// `torch.cuda.memory._record_memory_history` does. `LOCUS_MEMORY_HISTORY=1` turns it on
/// from the start. Recording costs a backtrace per allocation; off, the history is dropped.
pub fn record_history(on: bool) {
    blocks::record_history(on);
}

/// What [`snapshot`] saw.
#[derive(Clone, Debug)]
pub struct Snapshot {
    books: Vec<(DeviceId, blocks::DeviceBooks)>,
    value: blocks::pickle::Value,
}

/// One block of a [`Snapshot`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotBlock {
    /// The GPU (real or simulated) it is on.
    pub device: DeviceId,
    /// Its device address.
    pub address: u64,
    /// Bytes it holds (a cache bin for small tensors).
    pub size: usize,
    /// Bytes the tensor asked for (0 while cached).
    pub requested: usize,
    /// The stream it belongs to (locus's number for it).
    pub stream: u64,
    /// Free and kept for reuse on its stream.
    pub cached: bool,
    /// Where it was allocated, innermost frame first, as `name (file:line)`; empty
    /// without history.
    pub frames: Vec<String>,
}

/// One event of a [`Snapshot`]'s history, in PyTorch's words (`alloc`, `free_requested`,
/// `free_completed`, `segment_alloc`, `segment_free`, `oom`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotEvent {
    /// What happened.
    pub action: &'static str,
    /// The block's address; for `oom`, the bytes the driver reported free (PyTorch's
    /// `device_free`).
    pub address: u64,
    /// Its bytes (asked for, for `oom`).
    pub size: usize,
    /// Its stream.
    pub stream: u64,
}

impl Snapshot {
    /// Every block, by device and address.
    pub fn blocks(&self) -> Vec<SnapshotBlock> {
        let mut out = Vec::new();
        for (device, b) in &self.books {
            for (address, blk) in &b.blocks {
                out.push(SnapshotBlock {
                    device: *device,
                    address: *address,
                    size: blk.size,
                    requested: blk.requested,
                    stream: blk.stream,
                    cached: blk.cached,
                    frames: blk.site.as_ref().map_or_else(Vec::new, |s| {
                        s.frames().into_iter().map(|f| format!("{} ({}:{})", f.name, f.filename, f.line)).collect()
                    }),
                });
            }
        }
        out
    }

    /// The history of `device`, oldest first (empty unless recorded).
    pub fn history(&self, device: DeviceId) -> Vec<SnapshotEvent> {
        self.books
            .iter()
            .filter(|(d, _)| *d == device)
            .flat_map(|(_, b)| b.history.iter())
            .map(|e| SnapshotEvent { action: e.action.name(), address: e.addr, size: e.size, stream: e.stream })
            .collect()
    }

    /// The snapshot as PyTorch's pickle.
    pub fn to_pickle(&self) -> Vec<u8> {
        blocks::pickle::to_pickle(&self.value)
    }

    /// Writes [`Snapshot::to_pickle`] to `path` (created or truncated).
    pub fn write(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.to_pickle()).map_err(|e| crate::error::Error::InvalidArgument {
            op: "Snapshot::write",
            reason: format!("cannot write the snapshot {}: {e}", path.display()),
        })
    }
}
