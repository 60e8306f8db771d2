//! Out-of-memory errors that say where the memory went, from the books.

use std::collections::HashMap;

use super::{booked, books, device_books, history_on, note, pickle, Action, Books};
use crate::device_id::DeviceId;
use crate::error::Error;

/// An out-of-memory error on `device` for `requested` bytes, with `free` bytes the
/// driver reports free, that says what is allocated, reserved and free and where the
/// memory went; with `LOCUS_OOM_SNAPSHOT=path` it also writes the snapshot there.
pub(crate) fn out_of_memory(device: DeviceId, requested: usize, free: usize) -> Error {
    let (mut allocated, mut reserved, mut largest_cached) = (0usize, 0usize, 0usize);
    let mut sites: HashMap<String, (usize, usize)> = HashMap::new();
    let mut biggest: Vec<(usize, u64)> = Vec::new();
    {
        let mut all = books();
        // Host memory is not booked: its report names the totals only.
        let mut unbooked = Books::default();
        let b = match booked(device) {
            Some(ordinal) => device_books(&mut all, ordinal),
            None => &mut unbooked,
        };
        if history_on() {
            // PyTorch's oom entry carries the driver's free bytes where others carry an address.
            note(b, Action::Oom, free as u64, requested, 0, None);
        }
        for blk in b.live.values().map(|e| e.block()) {
            reserved += blk.size;
            if blk.cached {
                largest_cached = largest_cached.max(blk.size);
                continue;
            }
            allocated += blk.requested;
            biggest.push((blk.requested, blk.stream));
            if let Some(f) = blk.site.as_ref().and_then(|s| s.caller()) {
                let e = sites.entry(format!("{} ({}:{})", f.name, f.filename, f.line)).or_default();
                e.0 += blk.requested;
                e.1 += 1;
            }
        }
    }
    let mib = |b: usize| format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64);
    let mut report = format!(
        "asked for {}; {} allocated by tensors, {} reserved by locus ({} cached for reuse, the largest cached \
         block {}), {} free on the device",
        mib(requested),
        mib(allocated),
        mib(reserved),
        mib(reserved - allocated.min(reserved)),
        mib(largest_cached),
        mib(free)
    );
    if sites.is_empty() {
        biggest.sort_unstable_by(|a, b| b.cmp(a));
        let list: Vec<String> = biggest.iter().take(5).map(|(s, st)| format!("{} on stream {st}", mib(*s))).collect();
        if !list.is_empty() {
            report += &format!("; the largest live tensors: {}", list.join(", "));
        }
        report += "; set LOCUS_MEMORY_HISTORY=1 to see where the memory was allocated";
    } else {
        let mut top: Vec<(String, (usize, usize))> = sites.into_iter().collect();
        top.sort_by_key(|b| std::cmp::Reverse(b.1 .0));
        let list: Vec<String> =
            top.iter().take(5).map(|(at, (bytes, n))| format!("{} in {n} tensors at {at}", mib(*bytes))).collect();
        report += &format!("; the top allocation sites: {}", list.join("; "));
    }
    if let Some(path) = std::env::var_os("LOCUS_OOM_SNAPSHOT").filter(|p| !p.is_empty()) {
        let path = std::path::PathBuf::from(path);
        report += &match pickle::write_snapshot(&path) {
            Ok(()) => format!("; snapshot written to {}", path.display()),
            Err(e) => format!("; the snapshot could not be written to {}: {e}", path.display()),
        };
    }
    if let Some(fault) = crate::faults::note() {
        report += &format!("; {fault}");
    }
    Error::OutOfMemory { device, requested, free, report }
}
