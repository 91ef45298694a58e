//! UI tests live in tests/ui.rs.
