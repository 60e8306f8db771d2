//! Memory snapshots and out-of-memory reports (issue 37): a snapshot lists every block a
//! GPU holds, with history where each was allocated and what happened; written in
//! PyTorch's pickle format, Python's own `pickle` reads it with the keys
//! `torch.cuda._memory_viz` uses; an out-of-memory error says what was asked, allocated,
//! reserved and free, and where the memory went, and writes the snapshot for
//! `LOCUS_OOM_SNAPSHOT`.

use std::process::Command;
use std::sync::Mutex;

use locus::{memory, Cuda, DeviceId, Error, Tensor};

type G = Cuda<0>;

/// History is one switch per process.
static SERIAL: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether this build's backtraces name functions (release binaries stripped of their
/// symbols name none, and then no frame can be checked).
fn backtraces_resolve() -> bool {
    std::backtrace::Backtrace::force_capture().to_string().contains("backtraces_resolve")
}

fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("locus-snapshot-{name}-{}.pickle", std::process::id()))
}

#[inline(never)]
fn allocate_three_mebibytes() -> locus::Result<Tensor<G, u8>> {
    Tensor::<G, u8>::zeros([3 << 20])
}

#[test]
fn a_snapshot_lists_every_live_block_and_forgets_freed_ones() -> locus::Result<()> {
    let _one = lock();
    let (a, b) = (Tensor::<G, u8>::zeros([5 << 20])?, Tensor::<G, u8>::zeros([7 << 20])?);
    let blocks = memory::snapshot()?.blocks();
    let find = |blocks: &[memory::SnapshotBlock], n: usize| blocks.iter().find(|x| x.requested == n).cloned();
    let (ba, bb) = (find(&blocks, 5 << 20).expect("a's block"), find(&blocks, 7 << 20).expect("b's block"));
    for blk in [&ba, &bb] {
        assert_eq!(blk.device, DeviceId::Cuda(0));
        assert!(!blk.cached && blk.size >= blk.requested && blk.address != 0, "{blk:?}");
    }
    assert_ne!(ba.address, bb.address);
    assert_eq!(ba.stream, bb.stream, "both on the default stream");
    drop(a);
    let after = memory::snapshot()?.blocks();
    assert!(find(&after, 5 << 20).is_none(), "a freed block is gone from the live ones");
    assert!(after.iter().any(|x| x.address == bb.address && x.requested == 7 << 20));
    drop(b);
    // Host memory is not a GPU's: never in the snapshot.
    let host = Tensor::<locus::Cpu, u8>::zeros([11 << 20])?;
    assert!(memory::snapshot()?.blocks().iter().all(|x| x.device != DeviceId::Cpu && x.requested != 11 << 20));
    drop(host);
    Ok(())
}

#[test]
fn history_records_where_each_block_came_from_and_what_happened() -> locus::Result<()> {
    let _one = lock();
    memory::record_history(true);
    let t = allocate_three_mebibytes()?;
    let snap = memory::snapshot()?;
    memory::record_history(false);
    let blk = snap.blocks().into_iter().find(|b| b.requested == 3 << 20).expect("the block");
    let events = snap.history(DeviceId::Cuda(0));
    let mine: Vec<&str> = events.iter().filter(|e| e.address == blk.address).map(|e| e.action).collect();
    assert!(mine.contains(&"alloc"), "{mine:?}");
    if backtraces_resolve() {
        assert!(
            blk.frames.iter().any(|f| f.contains("allocate_three_mebibytes")),
            "the allocating fn among the frames: {:#?}",
            blk.frames
        );
    } else {
        println!("frames not checked: this build's backtraces name no functions");
    }
    drop(t);
    // Off, nothing more is recorded and the history is gone.
    assert!(memory::snapshot()?.history(DeviceId::Cuda(0)).is_empty());
    Ok(())
}

/// Python's `pickle` reads the snapshot, with the keys and types of PyTorch 2.11's own
/// `torch.cuda.memory._snapshot()` (compared on the H100).
#[test]
fn the_pickle_is_what_pytorch_snapshots_are() -> locus::Result<()> {
    let _one = lock();
    memory::record_history(true);
    let t = allocate_three_mebibytes()?;
    let cached = Tensor::<G, u8>::zeros([1000])?;
    drop(cached);
    let path = temp("format");
    memory::snapshot()?.write(&path)?;
    memory::record_history(false);
    drop(t);
    let check = r#"
import pickle, sys
d = pickle.load(open(sys.argv[1], "rb"))
assert set(d) == {"segments", "device_traces", "allocator_settings", "external_annotations"}, d.keys()
seg_keys = {"device", "address", "total_size", "allocated_size", "active_size", "requested_size",
            "stream", "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"}
for s in d["segments"]:
    assert set(s) == seg_keys, set(s) ^ seg_keys
    assert s["segment_type"] in ("small", "large") and isinstance(s["segment_pool_id"], tuple)
    for b in s["blocks"]:
        assert set(b) == {"address", "size", "requested_size", "state", "frames"}, b.keys()
        assert b["state"] in ("active_allocated", "inactive") and b["size"] >= b["requested_size"]
        for f in b["frames"]:
            assert set(f) == {"filename", "line", "name"} and isinstance(f["line"], int)
mine = [s for s in d["segments"] if s["requested_size"] == 3 << 20]
assert len(mine) == 1 and mine[0]["blocks"][0]["state"] == "active_allocated", mine
assert mine[0]["address"] > 0 and mine[0]["device"] == 0
trace = d["device_traces"][0]
for e in trace:
    assert set(e) == {"action", "addr", "size", "stream", "time_us", "compile_context", "user_metadata", "frames"}, e.keys()
assert any(e["action"] == "alloc" and e["addr"] == mine[0]["address"] for e in trace)
print("ok", len(d["segments"]), len(trace))
"#;
    match Command::new("python3").args(["-c", check]).arg(&path).output() {
        Ok(out) => {
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success() && text.starts_with("ok"), "python3 read the snapshot: {text}");
        }
        Err(e) => println!("skipped the Python check: no python3 ({e})"),
    }
    std::fs::remove_file(&path).ok();
    Ok(())
}

#[inline(never)]
fn hold_two_blocks() -> locus::Result<(Tensor<G, u8>, Tensor<G, u8>)> {
    Ok((Tensor::<G, u8>::zeros([6 << 20])?, Tensor::<G, u8>::zeros([2 << 20])?))
}

/// The out-of-memory error says what was asked, what is allocated and reserved, the
/// largest cached block, what is free, and where the memory went; in a child process with
/// `LOCUS_OOM_SNAPSHOT`, it also writes the snapshot.
#[test]
fn an_out_of_memory_error_explains_itself() -> locus::Result<()> {
    let _one = lock();
    let child = std::env::var_os("LOCUS_SNAPSHOT_CHILD").is_some();
    memory::record_history(true);
    let held = hold_two_blocks()?;
    let err = Tensor::<G, u8>::zeros([200usize << 30]).unwrap_err();
    memory::record_history(false);
    let Error::OutOfMemory { requested, ref report, .. } = err else { panic!("not out of memory: {err}") };
    assert_eq!(requested, 200 << 30);
    let text = err.to_string();
    println!("{text}");
    for part in [
        "asked for 204800.0 MiB",
        "allocated by tensors",
        "reserved by locus",
        "largest cached block",
        "free on the device",
    ] {
        assert!(text.contains(part), "{part:?} in {text}");
    }
    let allocated: f64 =
        report.split(" allocated by tensors").next().unwrap().rsplit(' ').nth(1).unwrap().parse().unwrap();
    assert!(allocated >= 8.0, "the 8 MiB held are counted: {text}");
    if backtraces_resolve() {
        assert!(text.contains("top allocation sites") && text.contains("hold_two_blocks"), "{text}");
    }
    if child {
        assert!(text.contains("snapshot written to"), "{text}");
        return Ok(());
    }
    drop(held);
    // The same in a child process whose environment names a snapshot file.
    let path = temp("oom");
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "an_out_of_memory_error_explains_itself", "--nocapture", "--test-threads=1"])
        .env("LOCUS_SNAPSHOT_CHILD", "1")
        .env("LOCUS_OOM_SNAPSHOT", &path)
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the child: {text}");
    let bytes = std::fs::read(&path).expect("the snapshot written at the out-of-memory error");
    assert!(bytes.starts_with(&[0x80, 2]) && bytes.ends_with(b"."), "a pickle");
    // Its history ends with the failure as PyTorch writes one: the driver's free bytes
    // under `device_free`, in place of an address (MemoryViz shows "Device has ... free").
    let check = r#"
import pickle, sys
d = pickle.load(open(sys.argv[1], "rb"))
ooms = [e for t in d["device_traces"] for e in t if e["action"] == "oom"]
assert len(ooms) == 1, ooms
e = ooms[0]
assert "addr" not in e and isinstance(e["device_free"], int) and e["size"] == 200 << 30, e
print("ok")
"#;
    match Command::new("python3").args(["-c", check]).arg(&path).output() {
        Ok(out) => {
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success() && text.starts_with("ok"), "python3 read the oom entry: {text}");
        }
        Err(e) => println!("skipped the Python check: no python3 ({e})"),
    }
    std::fs::remove_file(&path).ok();
    Ok(())
}
