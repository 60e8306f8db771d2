//! The end of a [`CudaBuffer`]: freed stream-ordered on its home stream after every
//! stream that used it (into the stream's block cache when small), retired through a
//! capture that still needs it, or handed back to its outside owner once its last use
//! is over.

use std::sync::Arc;

use cudarc::driver::result;

use super::{bin, CudaBuffer, Rare, CACHE_MAX};
use crate::backend::blocks;
use crate::backend::Release;

impl CudaBuffer {
    /// Hands memory made outside locus back to its owner once every stream that used it
    /// is done: the home stream waits for the others, the host for the home stream. If
    /// that cannot be known (a lost context, a failed wait, a stream in a capture), the
    /// memory is never handed back, rather than handed back in use.
    fn give_back(&mut self, release: Release, bytes: usize) {
        self.dev.account.release(bytes);
        let users = self.uses.get_mut().users.take();
        let streams = || std::iter::once(&*self.home).chain(users.iter());
        if self.dev.bind().is_err() || streams().any(|s| s.capture().is_some()) {
            return release.leak();
        }
        for r in &users {
            if self.home.wait_for(r).is_err() {
                return release.leak();
            }
        }
        match self.home.synchronize() {
            Ok(()) => release.run(),
            Err(_) => release.leak(),
        }
    }
}

impl Drop for CudaBuffer {
    fn drop(&mut self) {
        self.release();
        // SAFETY: the one release, with the device the home was made for; the buffer is going.
        unsafe { self.home.release(self.dev) };
    }
}

impl CudaBuffer {
    /// Frees, caches, retires or hands back the memory (see `Drop`).
    fn release(&mut self) {
        if let Some(c) = self.graph() {
            c.count_buffer(false);
        }
        if let Some(rare) = self.rare.take_if(|r| matches!(**r, Rare::Foreign(..))) {
            if let Rare::Foreign(release, bytes) = *rare {
                self.give_back(release, bytes);
            }
            return;
        }
        let Some(asked) = self.asked.take().filter(|_| self.ptr != 0) else { return };
        // In the books the block is given back or cached below; a block that must leak
        // (no context, a wait that failed) or that a capture retires leaves them too.
        let bytes = asked.get();
        let cap = bin(bytes);
        let cached = cap <= CACHE_MAX;
        let id = self.dev.id();
        if self.dev.bind().is_err() {
            blocks::free(id, self.ptr, false);
            self.dev.account.release(bytes);
            // Without the context nothing can be ordered: the block is not reused.
            return;
        }
        let users = self.uses.get_mut().users.take();
        // Memory of a graph, or memory whose free would be ordered on a stream being
        // captured (the free would become part of the graph): the capture frees it, after
        // the graph and these streams are done with it.
        let capture = self
            .graph()
            .cloned()
            .or_else(|| std::iter::once(&*self.home).chain(users.iter()).find_map(|s| s.capture()));
        if let Some(c) = capture {
            let mut after = users;
            after.push(Arc::clone(&*self.home));
            c.retire(self.ptr, bytes, after);
            blocks::free(id, self.ptr, false);
            return;
        }
        self.dev.account.release(bytes);
        for r in &users {
            if self.home.wait_for(r).is_err() {
                // A user may still use the memory and its end cannot be ordered before
                // a reuse: leak the block rather than hand it out again.
                blocks::free(id, self.ptr, false);
                return;
            }
        }
        // Work queued later on the home stream runs after every use above, so the memory
        // can be handed out again on this stream at once.
        if cached {
            asked.cached(id, self.ptr);
            // The block holds `cap` = `bin(bytes)` bytes (a cache bin, allocated on `self.home` or taken from its
            // cache) and this buffer, its only owner, is going; every user's use is ordered before this point of the
            // home stream (the waits above), and the rest is on that stream.
            // SAFETY: for the reasons in the comment just above.
            unsafe { self.home.put_cached(cap, self.ptr, asked) };
        } else {
            blocks::free(id, self.ptr, false);
            // The block came from cuMemAllocAsync on `self.home` (a larger-than-cache block is never shared with
            // another buffer) and is freed only here, once;
            // SAFETY: the stream is alive (held by `self`), the device's context is current (bind above), and every
            // user's use is ordered before this point of the stream (the waits above).
            let _ = unsafe { result::free_async(self.ptr, self.home.raw.0) };
        }
    }
}
