//! A buffer's home stream, held without a count when it is its device's default stream.

use std::mem::ManuallyDrop;
use std::ops::Deref;
use std::sync::Arc;

use crate::backend::cuda::driver::device::DeviceState;
use crate::backend::cuda::driver::stream::CudaStream;

/// The stream a buffer was allocated on. Any stream is counted, except the device's
/// default stream: the device state that holds it is never dropped (`CudaBackend::dev`
/// leaks it), so that stream lives for the process, and an op's output on it raises and
/// lowers no count (two atomic operations per op). Nothing is given back unless the
/// buffer calls [`Home::release`]: a buffer that is forgotten keeps its stream alive.
pub(in crate::backend::cuda::driver) struct Home(ManuallyDrop<Arc<CudaStream>>);

impl Home {
    /// `s`, a stream of `dev`.
    pub(in crate::backend::cuda::driver) fn of(dev: &'static DeviceState, s: &Arc<CudaStream>) -> Home {
        if !Arc::ptr_eq(s, &dev.stream) {
            return Home(ManuallyDrop::new(Arc::clone(s)));
        }
        // A bitwise copy of `dev.stream`, which counts the default stream for the process (the device state is never
        // dropped): the copy stays valid as long as any buffer, and is never dropped (`ManuallyDrop`; `release` skips
        // it), so no count is given back for it. A clone of it (`Arc::clone(&*home)`) counts as any other.
        // SAFETY: as said just above: `&dev.stream` is valid to read, and neither the copy nor the original is dropped.
        Home(ManuallyDrop::new(unsafe { std::ptr::read(&dev.stream) }))
    }

    /// Gives back the count this home holds, if any.
    ///
    /// # Safety
    /// Called at most once, with the device this home was made for (`Home::of`), and the
    /// home is not used afterwards.
    pub(in crate::backend::cuda::driver) unsafe fn release(&mut self, dev: &'static DeviceState) {
        if !Arc::ptr_eq(&self.0, &dev.stream) {
            // SAFETY: a stream other than the default one was counted by `of`; this is its only release (this fn's
            // contract), and nothing uses the home afterwards.
            unsafe { ManuallyDrop::drop(&mut self.0) };
        }
    }
}

impl Deref for Home {
    type Target = Arc<CudaStream>;

    #[inline]
    fn deref(&self) -> &Arc<CudaStream> {
        &self.0
    }
}
