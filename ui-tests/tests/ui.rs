//! Compile-fail tests: each file under `ui/fail/` is one misuse of Omega's typed API, and its `.stderr`
//! is what the compiler says — checked to name the right reason. `ui/pass/` must compile and run (on the
//! simulator). The `.stderr` files were blessed with the pinned toolchain (rust-toolchain.toml); re-bless
//! with `TRYBUILD=overwrite cargo test -p omega-ui-tests` and read the diff.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
    t.pass("tests/ui/pass/*.rs");
}
