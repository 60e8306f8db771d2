//! Traces (issue 37): a two-stream pipeline's trace has a track per stream, op slices
//! that never overlap on one stream, `wait` slices with flow arrows from the op waited
//! for, and ranges nested on their thread; the file is a trace-event JSON array.
//! Device times come from the host backend's simulated streams; on the cuda backend
//! only ranges are recorded yet, so the stream checks run on the host backend alone.

use std::collections::HashMap;
use std::sync::Mutex;

use locus::{on_stream, trace, Cuda, Stream, Tensor};
use serde_json::Value;

type G = Cuda<0>;

/// One trace per process at a time.
static SERIAL: Mutex<()> = Mutex::new(());

fn path(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("locus-trace-{name}-{}.json", std::process::id()))
}

/// The events of a finished trace, each checked against the trace-event format.
fn events(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).expect("the trace file");
    let all: Vec<Value> = serde_json::from_str(&text).expect("a JSON array");
    for e in &all {
        let ph = e["ph"].as_str().unwrap_or_else(|| panic!("no `ph` in {e}"));
        assert!(e["pid"].is_u64() && e["tid"].is_u64() && e["name"].is_string(), "{e}");
        match ph {
            "M" => assert!(e["args"]["name"].is_string() || e["args"]["sort_index"].is_u64(), "{e}"),
            "X" => assert!(e["ts"].is_f64() || e["ts"].is_u64(), "{e}"),
            "s" | "f" => assert!(e["id"].is_u64() && !e["ts"].is_null(), "{e}"),
            other => panic!("unexpected phase {other} in {e}"),
        }
        if ph == "X" {
            assert!(e["dur"].as_f64().is_some_and(|d| d >= 0.0), "{e}");
        }
    }
    all
}

fn ts(e: &Value) -> f64 {
    e["ts"].as_f64().unwrap()
}

fn end(e: &Value) -> f64 {
    ts(e) + e["dur"].as_f64().unwrap()
}

/// (pid, tid) of an event.
fn track(e: &Value) -> (u64, u64) {
    (e["pid"].as_u64().unwrap(), e["tid"].as_u64().unwrap())
}

#[test]
fn a_two_stream_pipeline_traces_its_streams_waits_and_ranges() -> locus::Result<()> {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    if locus::backend_name()? != "host" {
        println!("skipped: stream slices are traced on the host backend only (cuda: ranges only, for now)");
        return Ok(());
    }
    let file = path("pipeline");
    trace::start(&file)?;
    let (a, b) = (Stream::<G>::new()?, Stream::<G>::new()?);
    let mut sums = Vec::new();
    {
        let _outer = locus::range!("pipeline");
        for step in 0..3 {
            let _step = locus::range!("step {step}");
            // Stage one on `a`, stage two on `b`, which waits for it.
            let x = on_stream(&a, || -> locus::Result<_> {
                let m = Tensor::<G>::full([64, 64], 0.5)?;
                m.matmul(&m)
            })?;
            let ready = a.record_event()?;
            b.wait_event(&ready)?;
            sums.push(on_stream(&b, || x.sum())?);
        }
    }
    b.synchronize()?;
    for s in &sums {
        assert_eq!(s.item()?, 64.0 * 16.0 * 64.0);
    }
    let written = trace::stop()?;
    assert_eq!(written, file);
    let all = events(&file);

    // One track per stream, named, in the process of cuda:0.
    let named: HashMap<(u64, u64), &str> = all
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| (track(e), e["args"]["name"].as_str().unwrap()))
        .collect();
    let slices: Vec<&Value> = all.iter().filter(|e| e["ph"] == "X").collect();
    let on = |cat: &str, name: &str| -> Vec<&Value> {
        slices.iter().copied().filter(|e| e["cat"] == cat && e["name"] == name).collect()
    };
    let matmuls = on("op", "matmul");
    let sums_traced = on("op", "sum");
    assert_eq!((matmuls.len(), sums_traced.len()), (3, 3), "one matmul and one sum a step");
    let (ta, tb) = (track(matmuls[0]), track(sums_traced[0]));
    assert_ne!(ta, tb, "the two stages are on two tracks");
    assert!(matmuls.iter().all(|e| track(e) == ta) && sums_traced.iter().all(|e| track(e) == tb));
    assert!(named[&ta].starts_with("stream ") && named[&tb].starts_with("stream "), "{named:?}");
    let process = all.iter().find(|e| e["ph"] == "M" && e["name"] == "process_name" && e["pid"] == ta.0).unwrap();
    assert_eq!(process["args"]["name"], "cuda:0");

    // A stream runs one op at a time: its slices never overlap.
    let mut by_track: HashMap<(u64, u64), Vec<&Value>> = HashMap::new();
    for e in slices.iter().filter(|e| e["cat"] != "range") {
        by_track.entry(track(e)).or_default().push(e);
    }
    for (t, mut list) in by_track {
        list.sort_by(|x, y| ts(x).total_cmp(&ts(y)));
        for w in list.windows(2) {
            assert!(end(w[0]) <= ts(w[1]) + 1e-3, "overlapping slices on {t:?}: {} and {}", w[0], w[1]);
        }
    }

    // Each wait of `b` is a slice with a flow arrow from the end of `a`'s matmul.
    let all_waits = on("wait", "wait");
    let ops: Vec<&Value> = slices.iter().copied().filter(|e| e["cat"] == "op").collect();
    let waits: Vec<&Value> = all_waits.iter().copied().filter(|e| track(e) == tb).collect();
    assert!(waits.len() >= 3, "{} waits on b", waits.len());
    let flows: HashMap<u64, Vec<&Value>> =
        all.iter().filter(|e| e["ph"] == "s" || e["ph"] == "f").fold(HashMap::new(), |mut m, e| {
            m.entry(e["id"].as_u64().unwrap()).or_default().push(e);
            m
        });
    let mut from_matmul = 0;
    for pair in flows.values() {
        assert_eq!(pair.len(), 2, "a flow is one start and one end: {pair:?}");
        let (s, f) = if pair[0]["ph"] == "s" { (pair[0], pair[1]) } else { (pair[1], pair[0]) };
        assert_eq!((s["ph"].as_str(), f["ph"].as_str(), f["bp"].as_str()), (Some("s"), Some("f"), Some("e")));
        assert!(ts(s) <= ts(f) + 1e-3, "a flow goes forward in time: {s} {f}");
        let inside =
            |e: &Value, list: &[&Value]| list.iter().any(|x| track(x) == track(e) && ts(x) <= ts(e) && ts(e) <= end(x));
        assert!(inside(f, &all_waits), "the arrow ends in a wait slice: {f}");
        assert!(inside(s, &ops), "the arrow starts in an op: {s}");
        if inside(f, &waits) && inside(s, &matmuls) {
            from_matmul += 1;
        }
    }
    assert!(from_matmul >= 3, "{from_matmul} arrows start in a matmul of a");

    // Ranges nest on the thread that made them.
    let outer = on("range", "pipeline");
    assert_eq!(outer.len(), 1);
    for step in 0..3 {
        let r = on("range", &format!("step {step}"));
        assert_eq!(r.len(), 1, "step {step}");
        assert_eq!(track(r[0]), track(outer[0]));
        assert!(ts(outer[0]) <= ts(r[0]) && end(r[0]) <= end(outer[0]) + 1e-3, "step {step} inside the pipeline");
    }
    assert_eq!(named[&track(outer[0])], std::thread::current().name().unwrap());
    std::fs::remove_file(&file).ok();
    Ok(())
}

/// A trace that is already on, a stop with none, and a path that cannot be written are
/// `Err`s that say so; nothing is recorded with none on.
#[test]
fn trace_misuse_is_an_error() -> locus::Result<()> {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    assert!(!trace::is_on());
    let e = trace::stop().unwrap_err().to_string();
    assert!(e.contains("no trace is being written"), "{e}");
    let e = trace::start("/nonexistent-dir/locus/t.json").unwrap_err().to_string();
    assert!(e.contains("cannot write the trace /nonexistent-dir/locus/t.json"), "{e}");
    assert!(!trace::is_on());
    let file = path("twice");
    trace::start(&file)?;
    let e = trace::start(path("second")).unwrap_err().to_string();
    assert!(e.contains("already being written") && e.contains(&file.display().to_string()), "{e}");
    let r = locus::range!("kept");
    std::mem::forget(r); // never dropped: no slice, nothing else lost
    drop(locus::range!("closed"));
    trace::stop()?;
    let all = events(&file);
    assert!(all.iter().any(|e| e["name"] == "closed") && !all.iter().any(|e| e["name"] == "kept"));
    // Off again: a range records nothing and the file is not touched.
    drop(locus::range!("after"));
    assert_eq!(events(&file).len(), all.len());
    std::fs::remove_file(&file).ok();
    Ok(())
}
