//! The hazard checker wired into the host backend: each test leaves out one of the
//! steps locus takes (a cross-stream wait, a host synchronize, the record of a stream's
//! use before a free) by driving the backend's internals directly, and the checker must
//! report it with a message naming the op, the memory and both parties. The public API
//! takes those steps itself; tests/soundness.rs and tests/streams.rs show the reports
//! when a step is removed from the backend's own code.

use std::sync::Arc;

use crate::backend::host::buffer::HostBuffer;
use crate::backend::host::host;
use crate::backend::host::launch;
use crate::backend::host::streams::with_current;
use crate::backend::host::streams::{use_on_stream, HostEvent, HostStream};
use crate::backend::sync::hazard::{self, Kind};
use crate::device_id::DeviceId;
use crate::element::{DType, Scalar};

const DEV: DeviceId = DeviceId::Cuda(0);

/// A buffer of 16 f32 ones written by a `fill` queued on `s`.
fn filled_on(s: &Arc<HostStream>) -> HostBuffer {
    let account = host().account(DEV).expect("a simulated device");
    with_current(DEV, Arc::clone(s), || launch::fill(account, DType::F32, 16, Scalar::F32(1.0))).expect("fill")
}

/// These tests check the checker: with it turned off they fail, rather than pass
/// having checked nothing.
fn checker_on() {
    assert!(
        hazard::enabled(),
        "the hazard checker is off (LOCUS_HAZARD_CHECK=0): these tests check it; run them with it on"
    );
}

fn report_of(f: impl FnOnce()) -> String {
    let e = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("the checker must report this");
    e.downcast_ref::<String>().cloned().unwrap_or_default()
}

fn read_on(s: &Arc<HostStream>, x: &HostBuffer) {
    s.launch("relu", &[(x.region(Some(DType::F32)), Kind::Read)], Box::new(|| {})).expect("launch");
}

#[test]
fn a_kernel_queued_without_the_cross_stream_wait_is_reported() {
    checker_on();
    let (a, b) = (HostStream::new_side(DEV), HostStream::new_side(DEV));
    let x = filled_on(&a);
    let msg = report_of(|| read_on(&b, &x));
    let want = format!(
        "`relu` on stream {} of cuda:0 reads cuda:0 memory [f32 × 16] that `fill` on stream {} of cuda:0 writes, \
         with no event ordering the two",
        b.id, a.id
    );
    assert!(msg.contains(&want), "{msg}");
    // The wait locus queues for a cross-stream use orders it.
    let y = filled_on(&a);
    use_on_stream(&y, &b).expect("use_on");
    read_on(&b, &y);
}

#[test]
fn a_host_read_before_the_writing_stream_was_synchronized_is_reported() {
    checker_on();
    let a = HostStream::new_side(DEV);
    let x = filled_on(&a);
    let msg = report_of(|| {
        let _ = x.bytes();
    });
    assert!(
        msg.contains(&format!(
            "host code (a host read) reads cuda:0 memory [64 bytes] that `fill` queued on stream {} of cuda:0 writes",
            a.id
        )),
        "{msg}"
    );
    a.synchronize().expect("synchronize");
    assert_eq!(x.bytes().len(), 64);
}

#[test]
fn a_free_not_ordered_after_another_streams_use_is_reported() {
    checker_on();
    let (a, b) = (HostStream::new_side(DEV), HostStream::new_side(DEV));
    // `b` is ordered after the fill by an event, but its use is not recorded on the buffer.
    let x = filled_on(&a);
    let e = HostEvent::default();
    e.record(&a).expect("record");
    e.wait_on(&b).expect("wait");
    read_on(&b, &x);
    let msg = report_of(move || drop(x));
    assert!(
        msg.contains(&format!("was freed while `relu` queued on stream {} of cuda:0 may still use it", b.id)),
        "{msg}"
    );
    // Recorded through use_on_stream, the free waits for `b`.
    let y = filled_on(&a);
    use_on_stream(&y, &b).expect("use_on");
    read_on(&b, &y);
    drop(y);
}
