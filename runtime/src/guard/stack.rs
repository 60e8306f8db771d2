//! The thread's stack of guard entries: each live guard's id and device, innermost
//! last, and the backend switch that follows its top, which
//! [`current_device`](super::current_device) reads. Guards may leave in any order, so a
//! drop removes its own entry by id, and the backend is switched only when the top
//! changes; ids are unique across threads because a future's suspended entries may
//! resume on another one.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend;
use crate::device::DeviceId;
use crate::error::Result;

/// One live guard: its id and device.
#[derive(Clone, Copy, Debug)]
pub(super) struct Entry {
    pub(super) id: u64,
    pub(super) device: DeviceId,
}

/// The guards of one thread, innermost last.
pub(super) struct Stack {
    pub(super) entries: Vec<Entry>,
    /// The next id to give, and the end of the block of ids it comes from.
    next_id: u64,
    end_id: u64,
}

impl Stack {
    pub(super) fn top(&self) -> DeviceId {
        self.entries.last().map_or(DeviceId::Cpu, |e| e.device)
    }

    #[inline]
    pub(super) fn push(&mut self, device: DeviceId) -> u64 {
        if self.next_id == self.end_id {
            self.refill();
        }
        let id = self.next_id;
        self.next_id += 1;
        self.entries.push(Entry { id, device });
        id
    }

    #[cold]
    fn refill(&mut self) {
        self.next_id = ID_BLOCKS.fetch_add(ID_BLOCK, Ordering::Relaxed);
        self.end_id = self.next_id + ID_BLOCK;
    }

    /// Where the entry of guard `id` is (near the top when guards nest).
    pub(super) fn find(&self, id: u64) -> Option<usize> {
        self.entries.iter().rposition(|e| e.id == id)
    }
}

/// Ids are unique across threads (a future's suspended guards may resume on another
/// one), handed out in blocks so that a thread touches the shared counter once per block.
static ID_BLOCKS: AtomicU64 = AtomicU64::new(0);
const ID_BLOCK: u64 = 1 << 16;

thread_local! {
    pub(super) static STACK: RefCell<Stack> = const { RefCell::new(Stack { entries: Vec::new(), next_id: 0, end_id: 0 }) };
}

#[cfg(test)]
thread_local! {
    /// Backend `make_current` calls made by guards on this thread.
    pub(super) static SWITCHES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// The device the last of those calls made current (cpu before any).
    pub(super) static BACKEND_CURRENT: std::cell::Cell<DeviceId> = const { std::cell::Cell::new(DeviceId::Cpu) };
}

/// Makes `device` current on `backend`, the one that runs it.
pub(super) fn switch_to(backend: crate::backend::AnyBackend, device: DeviceId) -> Result<()> {
    #[cfg(test)]
    SWITCHES.with(|n| n.set(n.get() + 1));
    backend.make_current(device)?;
    #[cfg(test)]
    BACKEND_CURRENT.with(|c| c.set(device));
    Ok(())
}

/// Makes the backend follow the top of the stack when it changed from `before` to `now`.
pub(super) fn follow(before: DeviceId, now: DeviceId) {
    if before != now {
        // Every device on the stack existed when it was entered; a failure here has no
        // caller to go to, and the next guard or op reports it.
        let _ = backend::for_device(now).and_then(|b| switch_to(b, now));
    }
}

/// Removes the entry of guard `id`, if this thread's stack holds it.
pub(super) fn leave_entry(id: u64) {
    // `try_with`: a guard dropped while the thread's locals are torn down has nothing
    // left to restore.
    let _ = STACK.try_with(|stack| {
        let mut s = stack.borrow_mut();
        match s.entries.last() {
            Some(top) if top.id == id => {
                let before = top.device;
                s.entries.pop();
                let now = s.top();
                drop(s);
                follow(before, now);
            }
            // A guard entered later is still alive and stays current. Not found: the
            // guard is suspended with the future that holds it (`OnDevice`).
            _ => {
                if let Some(at) = s.find(id) {
                    s.entries.remove(at);
                }
            }
        }
    });
}
