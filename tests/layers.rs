//! The backend layer (`runtime/src/backend`) sits at the bottom of the runtime: it may use
//! the foundation modules below it (`error`, `element`, `shape`, `device_id`) and nothing
//! above (tensors, streams, copies, the loader, parallel work).
//! This test reads the sources and fails on any other `crate::` path there.
//!
//! It needs the sources, so where they are absent (a test binary run on another
//! machine) it skips with a reason.

use std::fs;
use std::path::{Path, PathBuf};

/// What the backend may name from the rest of the crate.
const ALLOWED: [&str; 5] = ["crate::backend", "crate::error", "crate::element", "crate::shape", "crate::device_id"];

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
            let ok = ALLOWED.iter().any(|a| path.starts_with(a));
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
    let src = "use crate::error::Result;\nuse crate::device_id::DeviceId;\nuse crate::stream::current;\n\
               let x = crate::pinned::acquire(1); // crate::tensor in a comment is fine\n\
               use crate::device::{Device, DeviceId};\n";
    let found: Vec<String> = upward_paths(src).into_iter().map(|(_, p)| p).collect();
    assert_eq!(found, vec!["crate::stream::current", "crate::pinned::acquire", "crate::device::{Device"]);
}

/// A backend module's id: `hazard` for `backend/hazard.rs`, `host` for
/// `backend/host/mod.rs`, `host/queue` for `backend/host/queue.rs`, `` for `backend/mod.rs`.
fn module_id(rel: &Path) -> String {
    let s = rel.to_string_lossy().replace('\\', "/");
    let s = s.strip_suffix(".rs").unwrap_or(&s).to_string();
    match s.strip_suffix("/mod").or(if s == "mod" { Some("") } else { None }) {
        Some(dir) => dir.to_string(),
        None => s,
    }
}

/// The first path segments named after `prefix` in `source`: `prefix::x` gives `x`,
/// `prefix::{a, b::c}` gives `a` and `b`.
fn named_after(source: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find(prefix) {
        rest = &rest[at + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1;
            let end = group
                .char_indices()
                .find(|&(_, c)| {
                    depth += match c {
                        '{' => 1,
                        '}' => -1,
                        _ => 0,
                    };
                    depth == 0
                })
                .map_or(group.len(), |(i, _)| i);
            let (mut d, mut item) = (0, String::new());
            for c in group[..end].chars().chain(std::iter::once(',')) {
                match c {
                    '{' => d += 1,
                    '}' => d -= 1,
                    ',' if d == 0 => {
                        let first = item.trim().split("::").next().unwrap_or("").trim().to_string();
                        if !first.is_empty() {
                            out.push(first);
                        }
                        item.clear();
                        continue;
                    }
                    _ => {}
                }
                item.push(c);
            }
        } else {
            let id: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !id.is_empty() {
                out.push(id);
            }
        }
    }
    out
}

/// The backend modules `source` (the file of module `me`) imports, by id.
fn backend_imports(me: &str, source: &str, modules: &[String]) -> Vec<String> {
    let code: String = source.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
    let (dir, is_dir_mod) = match me.rsplit_once('/') {
        Some((d, _)) => (d.to_string(), false),
        None if modules.iter().any(|m| m.starts_with(&format!("{me}/"))) => (me.to_string(), true),
        None => (String::new(), false),
    };
    let root_of = |x: &str| -> Option<String> { modules.iter().find(|m| *m == x).cloned() };
    let mut found = Vec::new();
    for x in named_after(&code, "crate::backend::") {
        found.extend(root_of(&x));
    }
    for x in named_after(&code, "super::super::") {
        found.extend(root_of(&x));
    }
    let supers = named_after(&code.replace("super::super::", "__"), "super::");
    for x in supers {
        // `super` of a root file (or of a dir's mod.rs) is the backend; of a file in a
        // dir, that dir's mod.rs, whose children are its siblings.
        if dir.is_empty() || is_dir_mod {
            found.extend(root_of(&x));
        } else {
            found.extend(root_of(&format!("{dir}/{x}")));
        }
    }
    found.sort();
    found.dedup();
    found.retain(|m| m != me && !m.is_empty() && *m != dir);
    found
}

/// The cells of the rows of the markdown table in `doc` whose header line starts with
/// `header`, up to the first line that is not a table line.
fn table_rows(doc: &str, header: &str) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in doc.lines() {
        if line.starts_with(header) {
            in_table = true;
            continue;
        }
        if in_table && !line.starts_with('|') {
            break;
        }
        if in_table && !line.starts_with("|---") {
            rows.push(line.trim_matches('|').split('|').map(|c| c.trim().to_string()).collect());
        }
    }
    rows
}

#[test]
fn the_module_map_in_design_lists_every_backend_module_and_its_imports() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (src, design) = (root.join("runtime/src/backend"), root.join("docs/DESIGN.md"));
    let Ok(doc) = fs::read_to_string(&design) else {
        eprintln!("skipped: {} is not on this machine", design.display());
        return;
    };
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let modules: Vec<String> = files.iter().map(|f| module_id(f.strip_prefix(&src).expect("under backend"))).collect();
    // The map: `| `file` | what | `a`, `b` (allowed imports, or `*`) |` rows after its header.
    let rows: Vec<(String, Vec<String>)> = table_rows(&doc, "| module | what | imports from backend |")
        .into_iter()
        .map(|cells| {
            let file = cells[0].trim_matches('`').to_string();
            let allowed = cells.last().map_or("", String::as_str).split(',').map(|a| a.trim().trim_matches('`'));
            (file, allowed.filter(|a| !a.is_empty() && *a != "—").map(String::from).collect())
        })
        .collect();
    assert!(rows.len() > 5, "no module map with the header `| module | what | imports from backend |` in DESIGN.md");
    let row_of = |m: &str| -> Option<&(String, Vec<String>)> {
        rows.iter().find(|(file, _)| {
            let id = module_id(Path::new(file));
            id == m || file.strip_suffix("/*.rs").is_some_and(|d| m.starts_with(&format!("{d}/")) || m == d)
        })
    };
    let mut report = Vec::new();
    for (file, _) in &rows {
        let covered = if let Some(d) = file.strip_suffix("/*.rs") {
            modules.iter().any(|m| m == d)
        } else {
            modules.contains(&module_id(Path::new(file)))
        };
        if !covered {
            report.push(format!("the map lists `{file}`, which is not a file under runtime/src/backend"));
        }
    }
    for (f, m) in files.iter().zip(&modules) {
        let Some((file, allowed)) = row_of(m) else {
            report.push(format!("{} is not in the module map", f.display()));
            continue;
        };
        if allowed.iter().any(|a| a == "*") {
            continue;
        }
        let text = fs::read_to_string(f).expect("a readable source file");
        let group = file.strip_suffix("/*.rs");
        for import in backend_imports(m, &text, &modules) {
            let same_group = group.is_some_and(|d| import == d || import.starts_with(&format!("{d}/")));
            if !same_group && !allowed.contains(&import) {
                report.push(format!("{} imports `{import}`, which its row (`{file}`) does not allow", f.display()));
            }
        }
    }
    assert!(report.is_empty(), "docs/DESIGN.md's module map does not match the code:\n{}", report.join("\n"));
}

#[test]
fn the_map_check_reads_grouped_and_nested_imports() {
    let src = "use crate::backend::{self, hazard::Kind, RawEvent};\nuse super::streams::{a, b};\n\
               use super::{buffer, HostBackend};\nlet x = super::super::ordering::f(); // crate::backend::account\n";
    let modules: Vec<String> = ["", "hazard", "ordering", "account", "host", "host/streams", "host/buffer", "host/ops"]
        .map(String::from)
        .to_vec();
    assert_eq!(backend_imports("host/ops", src, &modules), vec!["hazard", "host/buffer", "host/streams", "ordering"]);
    assert_eq!(module_id(Path::new("host/mod.rs")), "host");
    assert_eq!(module_id(Path::new("mod.rs")), "");
    assert_eq!(module_id(Path::new("cuda/launch.rs")), "cuda/launch");
}

/// The runtime's top-level modules, by layer, as DESIGN.md's first map gives them: rows
/// `| layer | `a`, `b` | … |` after the header `| layer | modules | may import |`.
fn layer_map(doc: &str) -> Vec<Vec<String>> {
    table_rows(doc, "| layer | modules | may import |")
        .into_iter()
        .map(|cells| {
            let names = cells.get(1).map_or("", String::as_str).split('`').skip(1).step_by(2);
            names.map(|n| n.trim_end_matches('/').to_string()).collect()
        })
        .collect()
}

#[test]
fn every_runtime_module_is_in_a_layer_and_imports_only_its_layer_and_below() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (src, design) = (root.join("runtime/src"), root.join("docs/DESIGN.md"));
    let Ok(doc) = fs::read_to_string(&design) else {
        eprintln!("skipped: {} is not on this machine", design.display());
        return;
    };
    let layers = layer_map(&doc);
    assert!(layers.len() >= 4, "no layer map with the header `| layer | modules | may import |` in DESIGN.md");
    let layer_of = |m: &str| layers.iter().position(|l| l.iter().any(|x| x == m));
    let mut report = Vec::new();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    for f in &files {
        let rel = f.strip_prefix(&src).expect("under runtime/src");
        let top =
            rel.components().next().expect("a path").as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
        if top == "lib" {
            continue;
        }
        let Some(mine) = layer_of(&top) else {
            report.push(format!("`{top}` ({}) is in no layer of the map", f.display()));
            continue;
        };
        let text = fs::read_to_string(f).expect("a readable source file");
        let code: String = text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n");
        let mut used = named_after(&code, "crate::");
        used.sort();
        used.dedup();
        for u in used {
            match layer_of(&u) {
                Some(l) if l <= mine => {}
                Some(_) => report.push(format!("{} (`{top}`) imports `{u}` from a layer above its own", f.display())),
                None => report.push(format!("{} imports `crate::{u}`, which is in no layer of the map", f.display())),
            }
        }
    }
    assert!(report.is_empty(), "the layer map in docs/DESIGN.md does not match the code:\n{}", report.join("\n"));
}
