//! CUDA streams and events, reference-counted so that memory allocated on a stream can
//! still be freed on it after the user's `Stream` is gone.

use cudarc::driver::{result, sys};

use super::device::{driver, set_current, Handle};
use crate::error::Result;

/// A stream of one device. Destroyed with its last reference (the device's default
/// stream lives as long as the process).
pub(crate) struct StreamObj {
    pub raw: Handle<sys::CUstream>,
    pub ordinal: u32,
    ctx: Handle<sys::CUcontext>,
}

impl std::fmt::Debug for StreamObj {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "stream {:p} on cuda:{}", self.raw.0, self.ordinal)
    }
}

impl StreamObj {
    /// A new non-blocking stream; the device's context must be current.
    pub fn create(ordinal: u32, ctx: sys::CUcontext) -> Result<Self> {
        let raw = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(driver(ordinal, "cuStreamCreate"))?;
        Ok(StreamObj { raw: Handle(raw), ordinal, ctx: Handle(ctx) })
    }

    pub fn synchronize(&self) -> Result<()> {
        unsafe { result::stream::synchronize(self.raw.0) }.map_err(driver(self.ordinal, "cuStreamSynchronize"))
    }

    /// Makes this stream wait for everything queued on `other` so far (no host wait).
    pub fn wait_for(&self, other: &StreamObj) -> Result<()> {
        let ev = EventObj::create(other.ordinal, other.ctx.0, false)?;
        ev.record(other)?;
        self.wait(&ev)
    }

    pub fn wait(&self, ev: &EventObj) -> Result<()> {
        unsafe { result::stream::wait_event(self.raw.0, ev.raw.0, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT) }
            .map_err(driver(self.ordinal, "cuStreamWaitEvent"))
    }
}

impl Drop for StreamObj {
    fn drop(&mut self) {
        // Queued work still completes; the driver releases the stream afterwards.
        if set_current(self.ordinal, self.ctx.0).is_ok() {
            let _ = unsafe { result::stream::destroy(self.raw.0) };
        }
    }
}

/// An event of one device.
pub(crate) struct EventObj {
    pub raw: Handle<sys::CUevent>,
    pub ordinal: u32,
    ctx: Handle<sys::CUcontext>,
}

impl std::fmt::Debug for EventObj {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "event {:p} on cuda:{}", self.raw.0, self.ordinal)
    }
}

impl EventObj {
    /// A new event; `timing` events can measure elapsed time, others are cheaper.
    pub fn create(ordinal: u32, ctx: sys::CUcontext, timing: bool) -> Result<Self> {
        set_current(ordinal, ctx)?;
        let flags =
            if timing { sys::CUevent_flags::CU_EVENT_DEFAULT } else { sys::CUevent_flags::CU_EVENT_DISABLE_TIMING };
        let raw = result::event::create(flags).map_err(driver(ordinal, "cuEventCreate"))?;
        Ok(EventObj { raw: Handle(raw), ordinal, ctx: Handle(ctx) })
    }

    pub fn record(&self, stream: &StreamObj) -> Result<()> {
        unsafe { result::event::record(self.raw.0, stream.raw.0) }.map_err(driver(self.ordinal, "cuEventRecord"))
    }

    pub fn synchronize(&self) -> Result<()> {
        unsafe { result::event::synchronize(self.raw.0) }.map_err(driver(self.ordinal, "cuEventSynchronize"))
    }

    pub fn is_complete(&self) -> Result<bool> {
        match unsafe { result::event::query(self.raw.0) } {
            Ok(()) => Ok(true),
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
            Err(e) => Err(driver(self.ordinal, "cuEventQuery")(e)),
        }
    }

    /// Milliseconds from `self` to `end`, both recorded and complete.
    pub fn elapsed_ms(&self, end: &EventObj) -> Result<f32> {
        unsafe { result::event::elapsed(self.raw.0, end.raw.0) }.map_err(driver(self.ordinal, "cuEventElapsedTime"))
    }
}

impl Drop for EventObj {
    fn drop(&mut self) {
        // Destroying a recorded event that has not completed is deferred by the driver.
        if set_current(self.ordinal, self.ctx.0).is_ok() {
            let _ = unsafe { result::event::destroy(self.raw.0) };
        }
    }
}
