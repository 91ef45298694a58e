//! Omega's benchmarks: criterion benches in `benches/` (argument encoding, the simulator's launch path),
//! and the GPU benchmark programs (`gpu/`, `cuda/`). This crate has no code of its own.
