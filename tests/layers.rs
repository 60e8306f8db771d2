//! The backend layer (`runtime/src/backend`) sits at the bottom of the runtime: it may use
//! the foundation modules below it (`error`, `element`, `shape`, and `DeviceId` from
//! `device`) and nothing above (tensors, streams, copies, the loader, parallel work).
//! This test reads the sources and fails on any other `crate::` path there.
//!
//! It needs the sources, so where they are absent (a test binary run on another
//! machine) it skips with a reason.

use std::fs;
use std::path::{Path, PathBuf};

/// What the backend may name from the rest of the crate.
const ALLOWED: [&str; 5] =
    ["crate::backend", "crate::error", "crate::element", "crate::shape", "crate::device::DeviceId"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Every `crate::…` path in `source` that `ALLOWED` does not cover, with its line.
/// A `use crate::x::{a, b}` names `crate::x::{`, which is checked as `crate::x::`.
fn upward_paths(source: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (n, line) in source.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(at) = rest.find("crate::") {
            let path: String =
                rest[at..].chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':' || *c == '{').collect();
            let ok = ALLOWED.iter().any(|a| path.starts_with(a))
                || path == "crate::device::{DeviceId}"
                || path == "crate::device::{DeviceId";
            if !ok {
                found.push((n + 1, path.clone()));
            }
            rest = &rest[at + "crate::".len()..];
        }
    }
    found
}

#[test]
fn the_backend_imports_nothing_above_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("runtime/src/backend");
    if !root.is_dir() {
        eprintln!("skipped: the sources ({}) are not on this machine", root.display());
        return;
    }
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    files.sort();
    assert!(files.len() > 5, "found only {} files under {}", files.len(), root.display());
    let mut report = Vec::new();
    for f in &files {
        let text = fs::read_to_string(f).expect("a readable source file");
        for (line, path) in upward_paths(&text) {
            report.push(format!("{}:{line}: `{path}` is above the backend layer", f.display()));
        }
    }
    assert!(report.is_empty(), "the backend reaches up:\n{}", report.join("\n"));
}

#[test]
fn the_check_sees_upward_paths_and_lets_the_foundation_through() {
    let src = "use crate::error::Result;\nuse crate::device::DeviceId;\nuse crate::stream::current;\n\
               let x = crate::pinned::acquire(1); // crate::tensor in a comment is fine\n\
               use crate::device::{Device, DeviceId};\n";
    let found: Vec<String> = upward_paths(src).into_iter().map(|(_, p)| p).collect();
    assert_eq!(found, vec!["crate::stream::current", "crate::pinned::acquire", "crate::device::{Device"]);
}
