//! CUDA events: the marks streams wait on and the host synchronises with. Each event
//! remembers which stream it was last recorded on and how many writes that stream had
//! queued by then, so that a stream waiting on it learns which writes it is now ordered
//! after (the books of `ordering`) and later cross-stream uses can skip a wait.

use cudarc::driver::{result, sys};

use crate::backend::api::fence::Fence;
use crate::backend::cuda::driver::device::{driver, failure, set_current, Handle, UNKNOWN};
use crate::backend::cuda::driver::graph::CudaCapture;
use crate::backend::cuda::driver::stream::CudaStream;
use crate::backend::cuda::driver::timing;
use crate::backend::sync::ordering::Mark;
use crate::error::Result;
use crate::faults::{gate, Point};
use crate::trace::Track;
use std::sync::{Arc, Mutex, Weak};

/// An event of one device.
pub(crate) struct CudaEvent {
    pub raw: Handle<sys::CUevent>,
    pub ordinal: u32,
    /// The stream and write count of the last record.
    mark: Mark,
    ctx: Handle<sys::CUcontext>,
    /// The capture the last record was part of: the event marks a point of that graph.
    captured: Mutex<Option<Weak<CudaCapture>>>,
    /// Where the last record stands in the trace being written, if one is (`timing`).
    traced_at: Mutex<Option<(Track, Arc<CudaEvent>)>>,
}

impl std::fmt::Debug for CudaEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "event {:p} on cuda:{}", self.raw.0, self.ordinal)
    }
}

impl CudaEvent {
    /// A new event; `timing` events can measure elapsed time, others are cheaper.
    pub(crate) fn create(ordinal: u32, ctx: sys::CUcontext, timing: bool) -> Result<Self> {
        set_current(ordinal, ctx)?;
        let flags =
            if timing { sys::CUevent_flags::CU_EVENT_DEFAULT } else { sys::CUevent_flags::CU_EVENT_DISABLE_TIMING };
        let raw = result::event::create(flags).map_err(driver(ordinal, "cuEventCreate"))?;
        Ok(CudaEvent {
            raw: Handle(raw),
            ordinal,
            ctx: Handle(ctx),
            mark: Mark::default(),
            captured: Mutex::new(None),
            traced_at: Mutex::new(None),
        })
    }

    pub(crate) fn record(&self, stream: &CudaStream) -> Result<()> {
        // Read before the record: the event then claims no write queued after it.
        let writes = stream.order.writes();
        // SAFETY: both handles are alive.
        gate(Point::Record, failure(UNKNOWN), || unsafe { result::event::record(self.raw.0, stream.raw.0) })
            .map_err(driver(self.ordinal, "cuEventRecord"))?;
        self.mark.set(stream.id, writes);
        *self.captured.lock().unwrap_or_else(|p| p.into_inner()) = stream.capture().map(|c| Arc::downgrade(&c));
        if crate::trace::is_on() {
            *self.traced_at.lock().unwrap_or_else(|p| p.into_inner()) = timing::record_point(stream);
        }
        Ok(())
    }

    /// Records a timing mark of `timing` on `stream`: the driver's record alone, with none
    /// of the books of [`CudaEvent::record`] (no stream waits for a mark).
    pub(in crate::backend::cuda) fn record_mark(&self, stream: &CudaStream) -> Result<()> {
        // SAFETY: both handles are alive.
        unsafe { result::event::record(self.raw.0, stream.raw.0) }.map_err(driver(self.ordinal, "cuEventRecord"))
    }

    /// Where the last record stands in the trace (see `timing::record_point`).
    pub(in crate::backend::cuda) fn traced_at(&self) -> Option<(Track, Arc<CudaEvent>)> {
        if crate::trace::is_on() {
            self.traced_at.lock().unwrap_or_else(|p| p.into_inner()).clone()
        } else {
            None
        }
    }

    /// The capture the event was last recorded in, if it was.
    pub(crate) fn capture(&self) -> Option<Weak<CudaCapture>> {
        self.captured.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// An error when the event was recorded in a capture: it then marks a point of a
    /// graph, which no stream or host can wait for.
    pub(crate) fn outside_captures(&self) -> Result<()> {
        match self.capture() {
            Some(_) => Err(crate::backend::sync::capture::event_of_ended_capture()),
            None => Ok(()),
        }
    }

    /// The stream and write count of the last record, if the event was recorded.
    pub(in crate::backend::cuda) fn recorded_at(&self) -> Option<(u64, u64)> {
        self.mark.get()
    }

    pub(crate) fn synchronize(&self) -> Result<()> {
        // SAFETY: `self.raw` is a live event made by `create` (not null), destroyed only in
        // drop, which cannot run while `&self` is borrowed.
        unsafe { result::event::synchronize(self.raw.0) }.map_err(driver(self.ordinal, "cuEventSynchronize"))
    }

    pub(crate) fn is_complete(&self) -> Result<bool> {
        // SAFETY: `self.raw` is a live, non-null event, destroyed only in drop.
        match unsafe { result::event::query(self.raw.0) } {
            Ok(()) => Ok(true),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            Err(e) => Err(driver(self.ordinal, "cuEventQuery")(e)),
        }
    }

    /// Milliseconds from `self` to `end`, both recorded and complete.
    pub(crate) fn elapsed_ms(&self, end: &CudaEvent) -> Result<f32> {
        // SAFETY: both events are live (borrowed; destroyed only in their drops) and were
        // made by `create`; the driver reports an error, not UB, for events not recorded,
        // not complete or made without timing.
        unsafe { result::event::elapsed(self.raw.0, end.raw.0) }.map_err(|e| match e.0 {
            sys::CUresult::CUDA_ERROR_NOT_READY | sys::CUresult::CUDA_ERROR_INVALID_HANDLE => {
                crate::backend::events_not_complete()
            }
            _ => driver(self.ordinal, "cuEventElapsedTime")(e),
        })
    }
}

impl Fence for CudaEvent {
    fn is_done(&self) -> bool {
        self.outside_captures().is_ok()
            && set_current(self.ordinal, self.ctx.0).is_ok()
            && matches!(self.is_complete(), Ok(true))
    }

    fn wait(&self) -> Result<()> {
        self.outside_captures()?;
        set_current(self.ordinal, self.ctx.0)?;
        self.synchronize()
    }
}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        // Destroying a recorded event that has not completed is deferred by the driver.
        if set_current(self.ordinal, self.ctx.0).is_ok() {
            // SAFETY: the event is live and destroyed only here, once, with its context
            // current; streams that still wait on it keep the wait (the driver defers the
            // release), and no `CudaEvent` use can follow its drop.
            let _ = unsafe { result::event::destroy(self.raw.0) };
        }
    }
}
