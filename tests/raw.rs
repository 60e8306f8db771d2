//! Tensors lent to code written against raw CUDA (`raw_view`, `raw_view_mut`) and memory
//! of such code taken in as tensors (`from_raw_parts`), on the selected backend. The
//! outside code is played by host copies on the host backend and by cudarc's driver
//! calls on the locus stream on the cuda backend.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{keep_busy, on_gpu};
use locus::{Cpu, Cuda, DeviceId, Dyn, Error, Stream, Tensor};

type G = Cuda<0>;

/// Writes `data` to `ptr` as work on `stream` would: a host copy on the host backend
/// (whose host waited for the stream), an async copy on the stream on CUDA.
fn outside_write(ptr: u64, stream: *mut std::ffi::c_void, data: &[f32]) {
    if on_gpu() {
        use cudarc::driver::{result, sys::CUstream};
        // SAFETY: `ptr` holds `data.len()` f32 of the device whose context locus made
        // current when it lent the view; the copy runs on the lent stream, and the host
        // waits for it before `data` goes.
        unsafe {
            result::memcpy_htod_async(ptr, data, stream as CUstream).unwrap();
            result::stream::synchronize(stream as CUstream).unwrap();
        }
    } else {
        // SAFETY: on the host backend `ptr` is host memory of `data.len()` f32, lent for
        // writing, which the host may touch now.
        unsafe { std::slice::from_raw_parts_mut(ptr as *mut f32, data.len()) }.copy_from_slice(data);
    }
}

/// Reads `n` f32 at `ptr` as work on `stream` would.
fn outside_read(ptr: u64, stream: *mut std::ffi::c_void, n: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; n];
    if on_gpu() {
        use cudarc::driver::{result, sys::CUstream};
        // SAFETY: as in `outside_write`, reading.
        unsafe {
            result::memcpy_dtoh_async(&mut out[..], ptr, stream as CUstream).unwrap();
            result::stream::synchronize(stream as CUstream).unwrap();
        }
    } else {
        // SAFETY: on the host backend `ptr` is host memory of `n` f32, lent for reading.
        out.copy_from_slice(unsafe { std::slice::from_raw_parts(ptr as *const f32, n) });
    }
    out
}

#[test]
fn a_raw_view_reads_what_locus_wrote_on_another_stream() -> locus::Result<()> {
    let side = Stream::<G>::new()?;
    keep_busy()?;
    let x = (Tensor::<G>::arange(0.0, 5.0, 1.0)? * 3.0)?; // queued behind the busy work
                                                          // SAFETY: the outside read runs on `side` while the view lives.
    let view = unsafe { x.raw_view(&side)? };
    assert_eq!((view.len(), view.bytes(), view.device()), (5, 20, DeviceId::Cuda(0)));
    assert_eq!(outside_read(view.device_ptr(), view.stream_handle(), view.len()), vec![0.0, 3.0, 6.0, 9.0, 12.0]);
    Ok(())
}

#[test]
fn a_raw_write_on_a_side_stream_is_seen_by_ops_on_the_default_stream() -> locus::Result<()> {
    let side = Stream::<G>::new()?;
    let mut x = Tensor::<G>::zeros([3])?;
    {
        // SAFETY: the outside write runs on `side` while the view lives.
        let view = unsafe { x.raw_view_mut(&side)? };
        outside_write(view.device_ptr(), view.stream_handle(), &[1.0, 2.0, 3.0]);
        view.finish()?;
    }
    // The default stream waits for `side`'s write before it adds: `side` is the writer.
    let waits = locus::cross_stream_waits();
    assert_eq!((&x + 1.0)?.to_vec()?, vec![2.0, 3.0, 4.0]);
    assert!(locus::cross_stream_waits() > waits, "the add did not wait for the raw write on the side stream");
    Ok(())
}

/// `mem::forget` of a write view is safe: the stream was the writer from the start.
#[test]
fn a_forgotten_write_view_still_orders_the_write() -> locus::Result<()> {
    let side = Stream::<G>::new()?;
    let mut x = Tensor::<G>::zeros([3])?;
    {
        // SAFETY: the outside write runs on `side` while the view lives.
        let view = unsafe { x.raw_view_mut(&side)? };
        outside_write(view.device_ptr(), view.stream_handle(), &[1.0, 2.0, 3.0]);
        std::mem::forget(view);
    }
    let waits = locus::cross_stream_waits();
    assert_eq!((&x + 1.0)?.to_vec()?, vec![2.0, 3.0, 4.0]);
    assert!(locus::cross_stream_waits() > waits, "the add did not wait for the forgotten view's stream");
    Ok(())
}

#[test]
fn a_raw_write_copies_away_from_clones_first() -> locus::Result<()> {
    let s = Stream::<G>::default_stream()?;
    let mut x = Tensor::<G>::full([2], 5.0)?;
    let kept = x.clone();
    {
        // SAFETY: the outside write runs on `s` while the view lives.
        let view = unsafe { x.raw_view_mut(&s)? };
        outside_write(view.device_ptr(), view.stream_handle(), &[7.0, 8.0]);
    } // the drop marks the write
    assert_eq!(x.to_vec()?, vec![7.0, 8.0]);
    assert_eq!(kept.to_vec()?, vec![5.0, 5.0]);
    Ok(())
}

#[test]
fn raw_views_of_host_memory_or_through_another_device_are_errors() -> locus::Result<()> {
    let s = Stream::<Dyn>::new_on(Dyn::new(DeviceId::Cuda(0)))?;
    let host = Tensor::<Cpu>::ones([2])?.into_dyn();
    // SAFETY: refused before anything is lent.
    let err = unsafe { host.raw_view(&s) }.unwrap_err();
    assert_eq!(err, Error::DeviceMismatch { op: "raw_view", lhs: DeviceId::Cpu, rhs: DeviceId::Cuda(0) });
    if !locus::testing::needs_devices_for(2, "the second device's part")? {
        return Ok(());
    }
    let mut other = Tensor::<Dyn>::zeros_on(Dyn::new(DeviceId::Cuda(1)), [2])?;
    // SAFETY: refused before anything is lent.
    let err = unsafe { other.raw_view_mut(&s) }.unwrap_err();
    assert!(matches!(err, Error::DeviceMismatch { op: "raw_view_mut", .. }), "{err}");
    Ok(())
}

/// Memory of the outside code: `n` f32 on cuda:0 and what gives it back, counting.
fn outside_alloc(data: &[f32], freed: &Arc<AtomicUsize>) -> (u64, Box<dyn FnOnce() + Send>) {
    let freed = Arc::clone(freed);
    if on_gpu() {
        use cudarc::driver::result;
        // Locus's ops made cuda:0's context current on this thread.
        let _ = Tensor::<G>::zeros([1]);
        // SAFETY: a context is current; a fresh allocation of the data's size.
        let ptr = unsafe { result::malloc_sync(std::mem::size_of_val(data)) }.unwrap();
        // SAFETY: `ptr` holds the data's size; a synchronous copy.
        unsafe { result::memcpy_htod_sync(ptr, data) }.unwrap();
        let release = move || {
            // SAFETY: `ptr` came from `malloc_sync` and is freed once, after its last use
            // (locus's contract); the releasing thread has the context current.
            unsafe { result::free_sync(ptr) }.unwrap();
            freed.fetch_add(1, Ordering::SeqCst);
        };
        (ptr, Box::new(release))
    } else {
        let boxed: Box<[f32]> = data.into();
        let n = boxed.len();
        let addr = Box::into_raw(boxed) as *mut f32 as usize;
        let release = move || {
            // SAFETY: `addr` is the box leaked above, of `n` f32, given back once.
            drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(addr as *mut f32, n)) });
            freed.fetch_add(1, Ordering::SeqCst);
        };
        (addr as u64, Box::new(release))
    }
}

#[test]
fn wrapped_memory_is_a_tensor_and_goes_back_after_its_last_use() -> locus::Result<()> {
    let freed = Arc::new(AtomicUsize::new(0));
    let (ptr, release) = outside_alloc(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &freed);
    let side = Stream::<G>::new()?;
    // SAFETY: 6 aligned f32 of cuda:0 from `outside_alloc`, used by nothing else until released.
    let t = unsafe { Tensor::<G>::from_raw_parts(ptr, [2, 3], &side, release)? };
    assert_eq!(t.shape(), &[2, 3]);
    let doubled = (&t * 2.0)?; // on the default stream, after `side`
    assert_eq!(t.sum()?.item()?, 21.0);
    drop(t);
    locus::synchronize(DeviceId::Cuda(0))?;
    assert_eq!(freed.load(Ordering::SeqCst), 1, "released once, after the last use");
    assert_eq!(doubled.to_vec()?, vec![2.0, 4.0, 6.0, 8.0, 10.0, 12.0]);
    Ok(())
}

#[test]
fn wrapping_refuses_a_misaligned_or_host_address_and_gives_the_memory_back() -> locus::Result<()> {
    let freed = Arc::new(AtomicUsize::new(0));
    let s = Stream::<G>::default_stream()?;
    let (ptr, release) = outside_alloc(&[0.0; 4], &freed);
    // SAFETY: refused (misaligned) before locus holds the memory.
    let err = unsafe { Tensor::<G>::from_raw_parts(ptr + 2, [1], &s, release) }.unwrap_err();
    assert!(err.to_string().contains("not aligned for f32"), "{err}");
    assert_eq!(freed.load(Ordering::SeqCst), 1);
    let (ptr, release) = outside_alloc(&[0.0; 4], &freed);
    // SAFETY: refused (bad shape) before locus holds the memory.
    let err = unsafe { Tensor::<G>::from_raw_parts(ptr, [usize::MAX, 2], &s, release) }.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { op: "from_raw_parts", .. }), "{err}");
    assert_eq!(freed.load(Ordering::SeqCst), 2);
    Ok(())
}
