//! Compile-fail cases (`fail/`) show each placement mistake and its message. Regenerate
//! `.stderr` files with `TRYBUILD=overwrite`. The pass cases (`pass/`), which show the
//! fixes, compile and run in tests/pass.rs: without them trybuild only checks (no code
//! generation), which is most of this test's time on a fresh clone.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("fail/*.rs");
}
