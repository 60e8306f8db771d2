//! Compile-fail cases (`fail/`) show each placement mistake and its message; pass cases
//! (`pass/`) show the fixes. Regenerate `.stderr` files with `TRYBUILD=overwrite`.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("fail/*.rs");
    t.pass("pass/*.rs");
}
