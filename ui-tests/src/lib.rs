//! Compile-fail and compile-pass tests of locus live in `tests/ui.rs`; this crate has no code.
