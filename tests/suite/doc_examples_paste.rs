//! The doc examples a user sees paste into a crate that depends on `locus`.
//!
//! rustdoc of the facade shows the runtime's items (it re-exports `locus_runtime::*`),
//! but `cargo test --doc -p locus` runs only the facade's own examples. The runtime's
//! examples run under `cargo test --doc -p locus-runtime`, where a hidden first line
//! `# extern crate locus_runtime as locus;` makes the `locus::…` paths resolve. What
//! that cannot show is that no visible line still names `locus_runtime` (it resolves
//! there too): this test does, by reading the sources. Together the two prove the
//! visible examples compile as pasted.
//!
//! It needs the sources, so where they are absent (a test binary run on another
//! machine) it skips with a reason.

use std::fs;
use std::path::{Path, PathBuf};

/// A visible line of a doc example that would not paste, or a stale name.
#[derive(Debug, PartialEq)]
struct Finding {
    line: usize,
    text: String,
    why: &'static str,
}

/// Whether a fence's info string (what follows the ```) makes a Rust block, whose `# `
/// lines rustdoc hides. Anything else (`text`, `sh`, …) shows every line.
fn is_rust_fence(info: &str) -> bool {
    info.split(|c: char| c == ',' || c.is_whitespace()).filter(|t| !t.is_empty()).all(|t| {
        matches!(
            t,
            "rust" | "ignore" | "no_run" | "should_panic" | "compile_fail" | "test_harness" | "standalone_crate"
        ) || t.starts_with("edition")
            || (t.len() == 5 && t.starts_with('E') && t[1..].bytes().all(|b| b.is_ascii_digit()))
    })
}

/// rustdoc's rule for a hidden line of a Rust example: `#` alone or `#` and a space.
fn is_hidden(line: &str) -> bool {
    let t = line.trim_start();
    t == "#" || t.starts_with("# ") || t.starts_with("#\t")
}

/// Checks a sequence of documentation lines (doc-comment text or markdown), each with
/// its line number; `None` ends a doc comment (a line of code between items).
fn check_doc_lines<'a>(lines: impl Iterator<Item = (usize, Option<&'a str>)>) -> Vec<Finding> {
    let mut found = Vec::new();
    // `Some(is_rust)` inside a fenced block.
    let mut fence: Option<bool> = None;
    for (line, doc) in lines {
        let Some(doc) = doc else {
            fence = None;
            continue;
        };
        let t = doc.trim_start();
        if let Some(info) = t.strip_prefix("```").or_else(|| t.strip_prefix("~~~")) {
            fence = match fence {
                Some(_) => None,
                None => Some(is_rust_fence(info.trim())),
            };
            continue;
        }
        if doc.contains("on_device!(") {
            found.push(Finding {
                line,
                text: doc.to_string(),
                why: "stale `on_device!(`: the macro is `with_device!`",
            });
        }
        let visible = match fence {
            Some(true) => !is_hidden(doc),
            Some(false) => true,
            None => false,
        };
        if visible && doc.contains("locus_runtime") {
            found.push(Finding {
                line,
                text: doc.to_string(),
                why: "a visible example names `locus_runtime`: a user of `locus` writes `locus::…`",
            });
        }
    }
    found
}

/// The doc-comment text of a Rust source line (`///` or `//!`), or `None` for code.
fn doc_text(line: &str) -> Option<&str> {
    let t = line.trim_start();
    let rest = if t.starts_with("////") { None } else { t.strip_prefix("///").or_else(|| t.strip_prefix("//!")) }?;
    Some(rest.strip_prefix(' ').unwrap_or(rest))
}

fn check_rust_source(src: &str) -> Vec<Finding> {
    check_doc_lines(src.lines().enumerate().map(|(i, l)| (i + 1, doc_text(l))))
}

fn check_markdown(src: &str) -> Vec<Finding> {
    check_doc_lines(src.lines().enumerate().map(|(i, l)| (i + 1, Some(l))))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn visible_doc_examples_use_locus_paths() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dirs = ["runtime/src", "macros/src", "src"].map(|d| root.join(d));
    if let Some(missing) = dirs.iter().find(|d| !d.is_dir()) {
        eprintln!("skipped: the sources are not here ({} is missing)", missing.display());
        return;
    }
    let mut files = Vec::new();
    for dir in &dirs {
        rust_files(dir, &mut files);
    }
    assert!(files.len() > 20, "found only {} source files under {}", files.len(), root.display());

    let mut report = Vec::new();
    let mut check = |path: &Path, found: Vec<Finding>| {
        for f in found {
            let path = path.strip_prefix(root).unwrap_or(path).display();
            report.push(format!("{path}:{}: {}\n    {}", f.line, f.why, f.text.trim()));
        }
    };
    for path in &files {
        check(path, check_rust_source(&fs::read_to_string(path).unwrap()));
    }
    let readme = root.join("README.md");
    if readme.is_file() {
        check(&readme, check_markdown(&fs::read_to_string(&readme).unwrap()));
    }
    assert!(
        report.is_empty(),
        "{} doc example line(s) would not paste into a crate using `locus`:\n{}",
        report.len(),
        report.join("\n")
    );
}

#[test]
fn the_check_finds_what_it_should() {
    let src = r#"
/// Text naming locus_runtime in prose is fine.
///
/// ```
/// # extern crate locus_runtime as locus;
/// use locus::Tensor;
/// use locus_runtime::Cuda;
/// # Ok::<(), locus_runtime::Error>(())
/// ```
fn f() {}
//! ```text
//! # locus_runtime::Error
//! ```
/// ```compile_fail,E0277
/// on_device!(dyn rank => ());
/// ```
"#;
    let lines: Vec<usize> = check_rust_source(src).iter().map(|f| f.line).collect();
    assert_eq!(lines, vec![7, 12, 15]);

    let md = "```rust\nuse locus_runtime::Cuda;\n# use locus_runtime::Dyn;\n```\nlocus_runtime in prose\n";
    assert_eq!(check_markdown(md).iter().map(|f| f.line).collect::<Vec<_>>(), vec![2]);
}
