//! The watchdog of a process communicator (PyTorch's NCCL watchdog): a collective whose
//! peer exited or hangs never ends on the device, and every later host wait on its stream
//! would hang with it. Each collective records an event after it; a thread per
//! communicator polls the oldest, and one not complete `timeout` after it was queued,
//! or an asynchronous error NCCL reports (`ncclCommGetAsyncError`, e.g. a remote error),
//! aborts the communicator (`ncclCommAbort`, which ends its kernels). Every later call on
//! the communicator is then an `Err` saying why.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread;
use std::time::{Duration, Instant};

use cudarc::nccl::{result as nccl, sys as nsys};

use crate::backend::cuda::comm::ProcessComm;
use crate::backend::cuda::driver::event::CudaEvent;
use crate::backend::cuda::driver::stream::CudaStream;
use crate::error::{Error, Result};

/// The collectives in flight on one communicator, and why it was aborted, if it was.
pub(crate) struct Watch {
    timeout: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Oldest first: the collective, when it was queued, the event after it.
    pending: VecDeque<(&'static str, Instant, Arc<CudaEvent>)>,
    broken: Option<String>,
    started: bool,
}

impl Watch {
    pub(in crate::backend::cuda) fn new(timeout: Duration) -> Self {
        Watch { timeout, state: Mutex::new(State::default()) }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `Err` once the communicator was aborted.
    pub(in crate::backend::cuda) fn check_healthy(&self) -> Result<()> {
        match &self.state().broken {
            Some(reason) => Err(Error::Dist { op: "collective", reason: reason.clone() }),
            None => Ok(()),
        }
    }

    /// Whether every collective queued so far has finished.
    pub(in crate::backend::cuda) fn all_done(&self) -> bool {
        self.state().pending.iter().all(|(_, _, ev)| ev.is_complete().unwrap_or(false))
    }

    /// `op` was just queued on `s` for `pc`: watch it (starting the thread the first time).
    pub(in crate::backend::cuda) fn queued(
        &self,
        pc: &Arc<ProcessComm>,
        op: &'static str,
        s: &CudaStream,
    ) -> Result<()> {
        let dev = pc.dev;
        let ev = Arc::new(CudaEvent::create(dev.ordinal, dev.ctx.cu_ctx(), false)?);
        ev.record(s)?;
        let mut st = self.state();
        st.pending.push_back((op, Instant::now(), ev));
        if !st.started {
            st.started = true;
            let weak = Arc::downgrade(pc);
            let poll = (self.timeout / 8).clamp(Duration::from_millis(1), Duration::from_millis(100));
            thread::Builder::new()
                .name(format!("locus-nccl-watchdog-{}", pc.rank))
                .spawn(move || watch(weak, poll))
                .map_err(|e| Error::Thread { message: e.to_string() })?;
        }
        Ok(())
    }
}

/// The watchdog thread: checks `pc` every `poll` until it is dropped or aborted.
fn watch(pc: Weak<ProcessComm>, poll: Duration) {
    loop {
        thread::sleep(poll);
        let Some(pc) = pc.upgrade() else { return };
        if pc.dev.bind().is_err() {
            return;
        }
        let Some(reason) = overdue(&pc) else { continue };
        abort(&pc, reason);
        return;
    }
}

/// Why `pc` must be aborted now, if it must.
fn overdue(pc: &ProcessComm) -> Option<String> {
    let w = &pc.watch;
    let mut st = w.state();
    while let Some((op, since, ev)) = st.pending.front() {
        match ev.is_complete() {
            Ok(true) => {
                st.pending.pop_front();
            }
            Ok(false) if since.elapsed() > w.timeout => {
                return Some(format!(
                    "`{op}` on NCCL (rank {} of {} on cuda:{}) did not finish within {:?}: a peer exited, \
                     crashed or stopped calling collectives; the communicator was aborted (make a new group)",
                    pc.rank, pc.world, pc.dev.ordinal, w.timeout
                ));
            }
            Ok(false) => break,
            Err(e) => return Some(format!("`{op}` on NCCL failed on the device: {e}; the communicator was aborted")),
        }
    }
    drop(st);
    let comm = pc.comm.lock().unwrap_or_else(|p| p.into_inner());
    if comm.0.is_null() {
        return None;
    }
    let mut status = nsys::ncclResult_t::ncclSuccess;
    // SAFETY: `comm.0` is a live communicator (not null: not aborted), used under its lock;
    // NCCL writes one result into `status`, a local.
    let called = unsafe { nsys::ncclCommGetAsyncError(comm.0, &mut status) };
    match (called, status) {
        (nsys::ncclResult_t::ncclSuccess, nsys::ncclResult_t::ncclSuccess | nsys::ncclResult_t::ncclInProgress) => None,
        (nsys::ncclResult_t::ncclSuccess, e) => Some(format!(
            "NCCL reported {e:?} on rank {} of {} (cuda:{}): a peer exited or the network failed; \
             the communicator was aborted (make a new group)",
            pc.rank, pc.world, pc.dev.ordinal
        )),
        (e, _) => Some(format!("ncclCommGetAsyncError failed ({e:?}); the communicator was aborted")),
    }
}

/// Aborts `pc`'s communicator: its kernels end, and every later call is an `Err` giving
/// `reason`.
fn abort(pc: &ProcessComm, reason: String) {
    let mut comm = pc.comm.lock().unwrap_or_else(|p| p.into_inner());
    if !comm.0.is_null() {
        // SAFETY: `comm.0` is a live communicator, aborted once (it is nulled below under
        // the same lock, and every use checks for null under it).
        let _ = unsafe { nccl::comm_abort(comm.0) };
        comm.0 = std::ptr::null_mut();
    }
    drop(comm);
    let mut st = pc.watch.state();
    st.broken = Some(reason);
    st.pending.clear();
}
