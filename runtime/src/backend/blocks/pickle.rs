//! Memory snapshots in PyTorch's format: the pickle `torch.cuda.memory._snapshot()`
//! returns, which `python -m torch.cuda._memory_viz` and PyTorch's memory viewer page
//! read. Each live block of a CUDA device is one segment holding one block (locus asks
//! the driver for each block, or reuses a cached one whole), `active_allocated` or, when
//! cached, `inactive`; `device_traces` holds the event history of each device, by ordinal.
//!
//! The pickle is written with protocol 2 opcodes only: dicts, lists, tuples, strings,
//! integers and booleans, which every unpickler reads.

use std::io::Write;
use std::path::Path;

use super::{read, Action, Block, DeviceBooks, Event, Frame, CACHE_SMALL};
use crate::device_id::DeviceId;
use crate::error::{Error, Result};

/// A value of the snapshot.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Value {
    Bool(bool),
    Int(i128),
    Str(String),
    List(Vec<Value>),
    Tuple(Vec<Value>),
    Dict(Vec<(String, Value)>),
}

fn s(v: &str) -> Value {
    Value::Str(v.to_string())
}

fn int(v: impl Into<i128>) -> Value {
    Value::Int(v.into())
}

fn size(v: usize) -> Value {
    Value::Int(v as i128)
}

fn dict(items: Vec<(&str, Value)>) -> Value {
    Value::Dict(items.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
}

fn frames(f: Vec<Frame>) -> Value {
    Value::List(
        f.into_iter()
            .map(|f| dict(vec![("filename", s(&f.filename)), ("line", int(f.line)), ("name", s(&f.name))]))
            .collect(),
    )
}

fn block_value(device: u32, addr: u64, b: &Block) -> Value {
    let f = b.site.as_ref().map_or_else(Vec::new, |s| s.frames());
    let allocated = if b.cached { 0 } else { b.size };
    let block = dict(vec![
        ("address", int(addr)),
        ("size", size(b.size)),
        ("requested_size", size(b.requested)),
        ("state", s(if b.cached { "inactive" } else { "active_allocated" })),
        ("frames", frames(f)),
    ]);
    dict(vec![
        ("device", int(device)),
        ("address", int(addr)),
        ("total_size", size(b.size)),
        ("allocated_size", size(allocated)),
        ("active_size", size(allocated)),
        ("requested_size", size(b.requested)),
        ("stream", int(b.stream)),
        ("segment_type", s(if b.size <= CACHE_SMALL { "small" } else { "large" })),
        ("segment_pool_id", Value::Tuple(vec![int(0), int(0)])),
        ("is_expandable", Value::Bool(false)),
        ("frames", Value::List(Vec::new())),
        ("blocks", Value::List(vec![block])),
    ])
}

fn event_value(e: &Event) -> Value {
    let f = e.site.as_ref().map_or_else(Vec::new, |s| s.frames());
    dict(vec![
        ("action", s(e.action.name())),
        // An oom entry names the device's free bytes instead (`device_free`, as PyTorch's).
        (if e.action == Action::Oom { "device_free" } else { "addr" }, int(e.addr)),
        ("size", size(e.size)),
        ("stream", int(e.stream)),
        ("time_us", int(e.time_us)),
        ("compile_context", s("N/A")),
        ("user_metadata", s("")),
        ("frames", frames(f)),
    ])
}

/// The snapshot of every CUDA device's books (the host backend's simulated devices
/// included), as `torch.cuda.memory._snapshot()` lays it out.
pub(crate) fn snapshot() -> Value {
    snapshot_of(&read())
}

/// The snapshot of `books` (see [`snapshot`]).
pub(crate) fn snapshot_of(books: &[(DeviceId, DeviceBooks)]) -> Value {
    let books: Vec<(u32, &DeviceBooks)> = books
        .iter()
        .filter_map(|(d, b)| match d {
            DeviceId::Cuda(o) => Some((*o, b)),
            _ => None,
        })
        .collect();
    let devices = books.iter().map(|(o, _)| *o as usize + 1).max().unwrap_or(0);
    let mut traces = vec![Value::List(Vec::new()); devices];
    let mut segments = Vec::new();
    for (o, b) in &books {
        segments.extend(b.blocks.iter().map(|(a, blk)| block_value(*o, *a, blk)));
        traces[*o as usize] = Value::List(b.history.iter().map(event_value).collect());
    }
    dict(vec![
        ("segments", Value::List(segments)),
        ("device_traces", Value::List(traces)),
        ("external_annotations", Value::List(Vec::new())),
        (
            "allocator_settings",
            dict(vec![
                ("PYTORCH_CUDA_ALLOC_CONF", s("")),
                ("max_split_size", int(-1)),
                ("garbage_collection_threshold", int(0)),
                ("expandable_segments", Value::Bool(false)),
                ("pinned_num_register_threads", int(1)),
                ("release_lock_on_cudamalloc", Value::Bool(false)),
                ("pinned_use_cuda_host_register", Value::Bool(false)),
                ("graph_capture_record_stream_reuse", Value::Bool(false)),
                ("roundup_power2_divisions", Value::Dict(Vec::new())),
            ]),
        ),
    ])
}

/// `v` as a pickle (protocol 2).
pub(crate) fn to_pickle(v: &Value) -> Vec<u8> {
    let mut out = vec![0x80, 2];
    write_value(&mut out, v);
    out.push(b'.');
    out
}

fn write_value(out: &mut Vec<u8>, v: &Value) {
    match v {
        Value::Bool(true) => out.push(0x88),
        Value::Bool(false) => out.push(0x89),
        Value::Int(i) => write_int(out, *i),
        Value::Str(t) => {
            out.push(b'X');
            out.extend_from_slice(&(t.len() as u32).to_le_bytes());
            out.extend_from_slice(t.as_bytes());
        }
        Value::List(items) => {
            out.push(b']');
            if !items.is_empty() {
                out.push(b'(');
                items.iter().for_each(|i| write_value(out, i));
                out.push(b'e');
            }
        }
        Value::Tuple(items) => {
            out.push(b'(');
            items.iter().for_each(|i| write_value(out, i));
            out.push(b't');
        }
        Value::Dict(items) => {
            out.push(b'}');
            if !items.is_empty() {
                out.push(b'(');
                for (k, v) in items {
                    write_value(out, &Value::Str(k.clone()));
                    write_value(out, v);
                }
                out.push(b'u');
            }
        }
    }
}

fn write_int(out: &mut Vec<u8>, i: i128) {
    if (0..=0xff).contains(&i) {
        out.extend_from_slice(&[b'K', i as u8]);
    } else if (0..=0xffff).contains(&i) {
        out.push(b'M');
        out.extend_from_slice(&(i as u16).to_le_bytes());
    } else if (i32::MIN as i128..=i32::MAX as i128).contains(&i) {
        out.push(b'J');
        out.extend_from_slice(&(i as i32).to_le_bytes());
    } else {
        // LONG1: the fewest little-endian two's-complement bytes that keep the sign.
        let bytes = i.to_le_bytes();
        let mut n = bytes.len();
        while n > 1 {
            let (top, next) = (bytes[n - 1], bytes[n - 2]);
            if (top == 0 && next & 0x80 == 0) || (top == 0xff && next & 0x80 != 0) {
                n -= 1;
            } else {
                break;
            }
        }
        out.extend_from_slice(&[0x8a, n as u8]);
        out.extend_from_slice(&bytes[..n]);
    }
}

/// Writes the snapshot to `path` (created or truncated).
pub(crate) fn write_snapshot(path: &Path) -> Result<()> {
    let bytes = to_pickle(&snapshot());
    let err = |e: std::io::Error| Error::InvalidArgument {
        op: "memory::snapshot",
        reason: format!("cannot write the snapshot {}: {e}", path.display()),
    };
    let mut f = std::fs::File::create(path).map_err(err)?;
    f.write_all(&bytes).map_err(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_take_the_shortest_opcode_that_keeps_their_value() {
        let enc = |i: i128| {
            let mut o = Vec::new();
            write_int(&mut o, i);
            o
        };
        assert_eq!(enc(7), [b'K', 7]);
        assert_eq!(enc(300), [b'M', 44, 1]);
        assert_eq!(enc(-1), [b'J', 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(enc(1 << 40), [0x8a, 6, 0, 0, 0, 0, 0, 1]);
        assert_eq!(enc(0x8000_0000), [0x8a, 5, 0, 0, 0, 0x80, 0]);
        assert_eq!(enc(-(1 << 40)), [0x8a, 6, 0, 0, 0, 0, 0, 0xff]);
        assert_eq!(enc(u64::MAX as i128), [0x8a, 9, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0]);
    }

    #[test]
    fn containers_use_marks() {
        let v = dict(vec![("a", Value::List(vec![int(1), Value::Bool(true)])), ("b", Value::Tuple(vec![]))]);
        let p = to_pickle(&v);
        assert_eq!(p, b"\x80\x02}(X\x01\x00\x00\x00a](K\x01\x88eX\x01\x00\x00\x00b(tu.".to_vec());
    }
}
