//! The attention library: prefill here; the decode kernels and the C entries are beside it.

pub mod prefill;
