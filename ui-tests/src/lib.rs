//! Compile-fail (UI) tests of Omega's typed API live in `tests/ui.rs` and `tests/ui/`; this crate has no
//! code of its own. See docs/testing.md.
