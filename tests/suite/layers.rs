//! The runtime's layers, read from its sources and held against docs/DESIGN.md:
//! - the backend (`runtime/src/backend`) may use the foundation modules below it
//!   (`error`, `element`, `shape`, `device_id`, `trace`, and the tests-only `env_fuzz`) and nothing above;
//! - inside the backend, each folder (or top-level file) imports only the folders its row
//!   of DESIGN's backend map allows, and no two folders import each other, directly or
//!   round a longer circle; `cuda/driver/` imports nothing else of `cuda/`, and
//!   `cuda/mod.rs` names every file of `cuda/`; no backend file is over 400 lines;
//! - every runtime module is in a layer of DESIGN's layer map and imports only its own
//!   layer and those below.
//!
//! Paths are read as segments, never as text prefixes (`crate::errors` is not
//! `crate::error`), and `super::`/`self::` paths are resolved from the module they are
//! written in (inline `mod tests { … }` blocks included), so `use super::tensor::Tensor`
//! in `backend/mod.rs` is an import of `crate::tensor`. A path re-exported by
//! `backend/mod.rs` (`crate::backend::Buffer`) counts as an import of the folder it comes
//! from. Paths written relative to the current module without a prefix (a `mod.rs`
//! naming its own children) stay inside their folder and are not read.
//!
//! It needs the sources, so where they are absent (a test binary run on another
//! machine) it skips with a reason.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// What the backend may name from the rest of the crate.
const FOUNDATION: [&str; 8] = ["error", "element", "shape", "device_id", "trace", "nvtx", "env_fuzz", "faults"];
/// The longest backend file, in lines.
const MAX_LINES: usize = 400;

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

/// The module a file under `runtime/src` defines, as segments from the crate root:
/// `backend/host/streams.rs` is `backend::host::streams`, `backend/host/mod.rs` is
/// `backend::host`, `lib.rs` is the root.
fn module_of(rel: &Path) -> Vec<String> {
    let s = rel.to_string_lossy().replace('\\', "/");
    let mut segs: Vec<String> = s.trim_end_matches(".rs").split('/').map(String::from).collect();
    if segs.last().is_some_and(|l| l == "mod" || l == "lib") {
        segs.pop();
    }
    segs
}

/// A path written in a source file: the line, and its segments from the crate root.
#[derive(Debug, PartialEq)]
struct Import {
    line: usize,
    path: Vec<String>,
}

/// The top-level items of a `{ … }` group's inside, split at its commas.
fn split_group(inner: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(inner[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(inner[start..].trim());
    out.into_iter().filter(|s| !s.is_empty()).collect()
}

/// The paths `text` (starting right after a `crate::`, `super::` or `self::`) names:
/// `a::b::C` is one, `a::{b, c::{d, e}}` is `a::b`, `a::c::d`, `a::c::e`; `self` in a
/// group names the group's own path.
fn expand(text: &str) -> Vec<Vec<String>> {
    let ident = |s: &str| -> usize { s.find(|c: char| !(c.is_alphanumeric() || c == '_')).unwrap_or(s.len()) };
    let mut base = Vec::new();
    let mut rest = text;
    loop {
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
            let mut out = Vec::new();
            for item in split_group(&group[..end]) {
                if item == "self" {
                    out.push(base.clone());
                    continue;
                }
                for tail in expand(item) {
                    out.push(base.iter().cloned().chain(tail).collect());
                }
            }
            return out;
        }
        let n = ident(rest);
        if n == 0 {
            return if base.is_empty() { Vec::new() } else { vec![base] };
        }
        base.push(rest[..n].to_string());
        match rest[n..].strip_prefix("::") {
            Some(r) => rest = r,
            None => return vec![base],
        }
    }
}

/// Every `crate::`, `super::` and `self::` path in `source`, the file of module `me`,
/// resolved to segments from the crate root. Comments are skipped; an inline
/// `mod name {` block is a module of its own for the paths inside it.
fn imports(me: &[String], source: &str) -> Vec<Import> {
    let mut found = Vec::new();
    let mut inline: Vec<(String, i32)> = Vec::new(); // (module, brace depth where it opened)
    let mut depth = 0i32;
    for (n, raw) in source.lines().enumerate() {
        let code = raw.split("//").next().unwrap_or("");
        let trimmed = code.trim_start();
        let opens_mod = trimmed.trim_start_matches("pub ").trim_start_matches("pub(crate) ").strip_prefix("mod ");
        if let Some(rest) = opens_mod.filter(|r| r.trim_end().ends_with('{')) {
            let name = rest.trim_end().trim_end_matches('{').trim().to_string();
            inline.push((name, depth));
        }
        let mut here: Vec<String> = me.to_vec();
        here.extend(inline.iter().map(|(m, _)| m.clone()));
        let bytes = code.as_bytes();
        let mut at = 0;
        while at < code.len() {
            // `$crate::` in a `macro_rules!` body names the public API from the user's
            // crate: no import of the module it is written in.
            let starts_word =
                at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_' || bytes[at - 1] == b'$');
            let rest = &code[at..];
            let (prefix_len, base) = if starts_word && rest.starts_with("crate::") {
                ("crate::".len(), Vec::new())
            } else if starts_word && rest.starts_with("self::") {
                ("self::".len(), here.clone())
            } else if starts_word && rest.starts_with("super::") {
                let mut up = here.clone();
                let mut r = rest;
                let mut len = 0;
                while let Some(next) = r.strip_prefix("super::") {
                    up.pop();
                    len += "super::".len();
                    r = next;
                }
                (len, up)
            } else {
                at += rest.chars().next().map_or(1, char::len_utf8);
                continue;
            };
            for tail in expand(&rest[prefix_len..]) {
                let mut path = base.clone();
                path.extend(tail);
                found.push(Import { line: n + 1, path });
            }
            at += prefix_len;
        }
        depth += code.matches('{').count() as i32 - code.matches('}').count() as i32;
        while inline.last().is_some_and(|&(_, d)| depth <= d) {
            inline.pop();
        }
    }
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

/// The names in backticks in `cell`: `` `a`, `b/` `` gives `a` and `b`.
fn names_in(cell: &str) -> Vec<String> {
    cell.split('`').skip(1).step_by(2).map(|n| n.trim_end_matches('/').trim_end_matches(".rs").to_string()).collect()
}

/// The sources of the runtime, or why they cannot be read here.
struct Sources {
    src: PathBuf,
    design: String,
    files: Vec<(PathBuf, Vec<String>, String)>,
}

fn sources() -> Option<Sources> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (src, design) = (root.join("runtime/src"), root.join("docs/DESIGN.md"));
    let (Ok(design), true) = (fs::read_to_string(&design), src.is_dir()) else {
        eprintln!("skipped: the sources ({}) or {} are not on this machine", src.display(), design.display());
        return None;
    };
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    paths.sort();
    let files = paths
        .into_iter()
        .map(|p| {
            let module = module_of(p.strip_prefix(&src).expect("under runtime/src"));
            let text = fs::read_to_string(&p).expect("a readable source file");
            (p, module, text)
        })
        .collect();
    Some(Sources { src, design, files })
}

/// The backend folder (or top-level file) a path under `crate::backend` belongs to: its
/// first segment when that is a module of the backend, else the folder `backend/mod.rs`
/// re-exports it from, else `mod` (an item of `backend/mod.rs` itself).
fn unit_of(path: &[String], units: &BTreeSet<String>, reexports: &BTreeMap<String, String>) -> String {
    let Some(first) = path.get(1) else { return "mod".into() };
    if units.contains(first) {
        return first.clone();
    }
    reexports.get(first).cloned().unwrap_or_else(|| "mod".into())
}

/// The names `backend/mod.rs` re-exports, each with the folder it comes from.
fn reexports_of(mod_rs: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let module = vec!["backend".to_string()];
    for statement in mod_rs.split(';') {
        let Some(at) = statement.find("pub(crate) use ") else { continue };
        let rest = &statement[at + "pub(crate) use ".len()..];
        let paths = imports(&module, &format!("self::{rest}"));
        for path in &paths {
            if let (Some(unit), Some(name)) = (path.path.get(1), path.path.last()) {
                out.insert(name.clone(), unit.clone());
            }
        }
        // `x as y`: `y` is of the same folder.
        if let Some(unit) = paths.first().and_then(|p| p.path.get(1)) {
            for alias in rest.split(" as ").skip(1) {
                let name: String = alias.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                out.insert(name, unit.clone());
            }
        }
    }
    out
}

/// A circle in `graph`, as the units round it, if there is one.
fn circle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut c = path[i..].to_vec();
            c.push(n.to_string());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for next in graph.get(n).into_iter().flatten() {
            if let Some(c) = visit(next, graph, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|n| visit(n, graph, &mut Vec::new(), &mut done))
}

#[test]
fn the_backend_imports_nothing_above_it() {
    let Some(s) = sources() else { return };
    let mut report = Vec::new();
    let mut seen = 0;
    for (f, module, text) in &s.files {
        if module.first().map(String::as_str) != Some("backend") {
            continue;
        }
        seen += 1;
        for i in imports(module, text) {
            let top = i.path.first().map(String::as_str).unwrap_or("");
            if top != "backend" && !FOUNDATION.contains(&top) {
                report.push(format!(
                    "{}:{}: `crate::{}` is above the backend layer",
                    f.display(),
                    i.line,
                    i.path.join("::")
                ));
            }
        }
    }
    assert!(seen > 5, "found only {seen} files under {}", s.src.join("backend").display());
    assert!(report.is_empty(), "the backend reaches up:\n{}", report.join("\n"));
}

#[test]
fn the_reader_resolves_super_and_groups_by_segment() {
    let me: Vec<String> = ["backend"].map(String::from).to_vec();
    let src = "use super::tensor::Tensor;\nuse crate::errors::E; // crate::stream in a comment\n\
               use crate::backend::{self, sync::hazard::{self, Kind}, Buffer};\n\
               mod tests {\n    use super::*;\n    use super::super::error::Result;\n}\nuse self::api::op;\n";
    let found: Vec<String> = imports(&me, src).into_iter().map(|i| i.path.join("::")).collect();
    assert_eq!(
        found,
        vec![
            "tensor::Tensor",
            "errors::E",
            "backend",
            "backend::sync::hazard",
            "backend::sync::hazard::Kind",
            "backend::Buffer",
            "error::Result",
            "backend::api::op",
        ]
    );
    // The first is above the backend, the second is not `crate::error`.
    assert!(!FOUNDATION.contains(&"tensor") && !FOUNDATION.contains(&"errors"));
    assert_eq!(module_of(Path::new("backend/host/mod.rs")), vec!["backend", "host"]);
    assert_eq!(
        module_of(Path::new("backend/cuda/driver/buffer/free.rs")),
        vec!["backend", "cuda", "driver", "buffer", "free"]
    );
    let graph: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "a")]
        .into_iter()
        .map(|(x, y)| (x.to_string(), BTreeSet::from([y.to_string()])))
        .collect();
    assert_eq!(circle(&graph), Some(vec!["a", "b", "c", "a"].into_iter().map(String::from).collect()));
}

#[test]
fn the_backend_folders_import_only_what_their_row_allows_and_form_no_circle() {
    let Some(s) = sources() else { return };
    let backend = s.src.join("backend");
    let units: BTreeSet<String> = fs::read_dir(&backend)
        .expect("the backend folder")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().trim_end_matches(".rs").to_string())
        .filter(|u| u != "mod")
        .collect();
    let mod_rs = fs::read_to_string(backend.join("mod.rs")).expect("backend/mod.rs");
    let reexports = reexports_of(&mod_rs);
    // The map: `| `folder/` | what | `a`, `b` (allowed, or —) |` rows after its header.
    let rows: BTreeMap<String, BTreeSet<String>> = table_rows(&s.design, "| folder | what | imports from backend |")
        .into_iter()
        .filter_map(|cells| {
            let unit = names_in(cells.first()?).into_iter().next()?;
            Some((unit, names_in(cells.last()?).into_iter().collect()))
        })
        .collect();
    assert!(rows.len() > 5, "no backend map with the header `| folder | what | imports from backend |` in DESIGN.md");
    let mut report = Vec::new();
    for u in &units {
        if !rows.contains_key(u) {
            report.push(format!("backend/{u} is not in DESIGN.md's backend map"));
        }
    }
    for u in rows.keys().filter(|u| *u != "mod") {
        if !units.contains(u) {
            report.push(format!("the backend map lists `{u}`, which is not under runtime/src/backend"));
        }
    }
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (f, module, text) in &s.files {
        if module.first().map(String::as_str) != Some("backend") || module.len() < 2 {
            continue;
        }
        let me = &module[1];
        let lines = text.lines().count();
        if lines > MAX_LINES {
            report.push(format!("{} has {lines} lines (at most {MAX_LINES}): it holds two ideas", f.display()));
        }
        if module.last().is_some_and(|m| m.starts_with("host_")) && me != "host" {
            report.push(format!("{} is a host file outside backend/host/", f.display()));
        }
        let allowed = rows.get(me).cloned().unwrap_or_default();
        for i in imports(module, text) {
            if i.path.first().map(String::as_str) != Some("backend") {
                continue;
            }
            let unit = unit_of(&i.path, &units, &reexports);
            if unit == *me || unit == "mod" {
                continue;
            }
            graph.entry(me.clone()).or_default().insert(unit.clone());
            if !allowed.contains(&unit) {
                report.push(format!(
                    "{}:{}: `crate::{}` is of backend/{unit}, which the row of `{me}` does not allow",
                    f.display(),
                    i.line,
                    i.path.join("::")
                ));
            }
            // Inside cuda/: the driver layer is below everything else there.
            if me == "cuda" && module.get(2).is_some_and(|m| m == "driver") {
                if let Some(sub) = i.path.get(2).filter(|s| ["ops", "transfer", "comm"].contains(&s.as_str())) {
                    report.push(format!("{}:{}: cuda/driver/ imports cuda/{sub}/", f.display(), i.line));
                }
            }
        }
    }
    if let Some(c) = circle(&graph) {
        report.push(format!("the backend folders import each other in a circle: {}", c.join(" -> ")));
    }
    assert!(report.is_empty(), "docs/DESIGN.md's backend map does not match the code:\n{}", report.join("\n"));
}

#[test]
fn cuda_mod_names_every_file_of_the_cuda_backend() {
    let Some(s) = sources() else { return };
    let cuda = s.src.join("backend/cuda");
    let doc: String = fs::read_to_string(cuda.join("mod.rs"))
        .expect("cuda/mod.rs")
        .lines()
        .filter(|l| l.starts_with("//!"))
        .collect::<Vec<_>>()
        .join("\n");
    let named: BTreeSet<String> = names_in(&doc).into_iter().collect();
    let mut missing = Vec::new();
    for (f, module, _) in &s.files {
        if module.len() < 3 || module[..2] != ["backend", "cuda"] {
            continue;
        }
        let name = module[2..].join("/");
        if !named.contains(&name) {
            missing.push(format!("{} (write `{name}` in its list)", f.display()));
        }
    }
    assert!(missing.is_empty(), "cuda/mod.rs's list of its files misses:\n{}", missing.join("\n"));
}

/// The runtime's top-level modules, by layer, as DESIGN.md's first map gives them: rows
/// `| layer | `a`, `b` | … |` after the header `| layer | modules | may import |`.
fn layer_map(doc: &str) -> Vec<Vec<String>> {
    table_rows(doc, "| layer | modules | may import |").into_iter().map(|cells| names_in(&cells[1])).collect()
}

#[test]
fn every_runtime_module_is_in_a_layer_and_imports_only_its_layer_and_below() {
    let Some(s) = sources() else { return };
    let layers = layer_map(&s.design);
    assert!(layers.len() >= 4, "no layer map with the header `| layer | modules | may import |` in DESIGN.md");
    let layer_of = |m: &str| layers.iter().position(|l| l.iter().any(|x| x == m));
    let mut report = Vec::new();
    for (f, module, text) in &s.files {
        let Some(top) = module.first() else { continue };
        let Some(mine) = layer_of(top) else {
            report.push(format!("`{top}` ({}) is in no layer of the map", f.display()));
            continue;
        };
        let mut used: Vec<(usize, String)> =
            imports(module, text).into_iter().filter_map(|i| Some((i.line, i.path.first()?.clone()))).collect();
        used.sort_by(|a, b| a.1.cmp(&b.1));
        used.dedup_by(|a, b| a.1 == b.1);
        for (line, u) in used {
            match layer_of(&u) {
                Some(l) if l <= mine => {}
                Some(_) => {
                    report.push(format!("{}:{line} (`{top}`) imports `{u}` from a layer above its own", f.display()))
                }
                None => {
                    report.push(format!("{}:{line} imports `crate::{u}`, which is in no layer of the map", f.display()))
                }
            }
        }
    }
    assert!(report.is_empty(), "the layer map in docs/DESIGN.md does not match the code:\n{}", report.join("\n"));
}
