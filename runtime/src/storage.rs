//! A tensor's memory: one backend buffer with its device, type and length.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend::{self, host, Buffer};
use crate::device::DeviceId;
use crate::element::DType;
use crate::error::Result;

/// Tensors share it through an `Arc`; only a tensor that holds the sole `Arc` may write
/// it in place (`as_mut_slice`), and such a write renews [`Storage::contents`].
#[derive(Debug)]
pub(crate) struct Storage {
    pub buf: Buffer,
    pub device: DeviceId,
    pub dtype: DType,
    /// Elements.
    pub len: usize,
    contents: ContentsId,
}

/// Names one storage's contents: unique in the process, never reused, and renewed when
/// the storage is written in place. Equal ids mean equal contents, so a copy made from
/// a storage is still a copy of it while its id is unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct ContentsId(u64);

/// Ids a thread takes from the process's counter at a time: a new storage takes the next
/// of its thread's range, with no atomic add per op.
const ID_RANGE: u64 = 1024;

impl ContentsId {
    fn next() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        thread_local! {
            /// The next id of this thread's range and the range's end.
            static RANGE: Cell<(u64, u64)> = const { Cell::new((0, 0)) };
        }
        let from_range = RANGE.try_with(|r| {
            let (mut next, mut end) = r.get();
            if next == end {
                next = NEXT.fetch_add(ID_RANGE, Ordering::Relaxed);
                end = next + ID_RANGE;
            }
            r.set((next + 1, end));
            next
        });
        // A thread whose locals are gone (its exit) takes one id at a time.
        ContentsId(from_range.unwrap_or_else(|_| NEXT.fetch_add(1, Ordering::Relaxed)))
    }
}

impl Storage {
    pub(crate) fn new(buf: Buffer, device: DeviceId, dtype: DType, len: usize) -> Self {
        Storage { buf, device, dtype, len, contents: ContentsId::next() }
    }

    /// The id of the current contents.
    pub(crate) fn contents(&self) -> ContentsId {
        self.contents
    }

    /// The buffer, to be written in place: the contents get a new id.
    pub(crate) fn buf_mut(&mut self) -> &mut Buffer {
        self.contents = ContentsId::next();
        &mut self.buf
    }

    pub(crate) fn bytes(&self) -> usize {
        self.len * self.dtype.size()
    }

    /// The backend that owns this storage.
    pub(crate) fn backend(&self) -> Result<crate::backend::AnyBackend> {
        backend::for_device(self.device)
    }

    /// Copies the contents into `out`, which holds exactly [`Storage::bytes`] bytes.
    pub(crate) fn read_into(&self, out: &mut [u8]) -> Result<()> {
        // SAFETY: a download writes only initialized bytes through the view (its contract).
        let out = unsafe { crate::backend::transfer::as_uninit(out) };
        self.buf.download(out)
    }

    /// [`Storage::read_into`] memory that may be uninitialized (a fresh `Vec`'s
    /// capacity): `Ok` means every byte of `out` was written.
    pub(crate) fn read_into_uninit(&self, out: &mut [std::mem::MaybeUninit<u8>]) -> Result<()> {
        self.buf.download(out)
    }

    /// A copy of this storage on `dst`: within one backend its own copy, across
    /// backends through host memory.
    pub(crate) fn copy_to(&self, dst: DeviceId) -> Result<Storage> {
        let (from, to) = (self.backend()?, backend::for_device(dst)?);
        // Behind the capture gate every copy goes to the gate, which refuses one between
        // host and device whichever backends hold the two sides.
        let buf = if backend::same(&from, &to) || to.is_gated() {
            to.copy(&self.buf, dst)?
        } else if let Some(h) = self.buf.as_host() {
            if h.is_pinned() {
                // Page-locked memory: the DMA reads the source after this returns, so the
                // copy holds the block from reuse and from host writes until it is done.
                let stream = match crate::backend::dispatch::current::current(dst) {
                    Some(s) => s,
                    None => to.default_stream(dst)?,
                };
                to.upload_async(dst, h, &stream)?.0
            } else {
                // Pageable memory: the backend has read it when `upload` returns.
                to.upload(dst, h.bytes())?
            }
        } else {
            // Device memory to the host: straight into the new host buffer.
            let mut out = host::host().alloc_for_overwrite(dst, self.bytes())?;
            // SAFETY: a download writes only initialized bytes through the view (its contract).
            let bytes = unsafe { crate::backend::transfer::as_uninit(out.bytes_mut()) };
            self.buf.download(bytes)?;
            Buffer::host(out)
        };
        Ok(Storage::new(buf, dst, self.dtype, self.len))
    }
}

#[cfg(test)]
mod tests {
    use super::{ContentsId, Storage};
    use crate::backend::Buffer;

    /// An op moves its output's buffer a few times (into the `Buffer`, the `Storage` and
    /// its `Arc`): up to 128 bytes the compiler copies it inline, beyond that each move is
    /// a call of `memcpy` (about 190 of an eager add's ~2,700 host instructions when a
    /// `Storage` took 264 bytes).
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn a_storage_moves_without_memcpy() {
        assert!(std::mem::size_of::<Buffer>() <= 96, "Buffer: {} bytes", std::mem::size_of::<Buffer>());
        assert!(std::mem::size_of::<Storage>() <= 128, "Storage: {} bytes", std::mem::size_of::<Storage>());
    }

    /// Threads take ids from ranges of the one counter: no id is handed out twice, also
    /// once a thread has used up its first range.
    #[test]
    fn contents_ids_are_unique_across_threads() {
        let per_thread = 3 * super::ID_RANGE as usize + 7;
        let threads: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(move || (0..per_thread).map(|_| ContentsId::next()).collect::<Vec<_>>()))
            .collect();
        let mut all: Vec<ContentsId> = threads.into_iter().flat_map(|t| t.join().unwrap()).collect();
        let n = all.len();
        all.sort_by_key(|c| c.0);
        all.dedup();
        assert_eq!(all.len(), n, "an id was handed out twice");
    }
}
