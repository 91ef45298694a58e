//! The runtime core: the only layer of `omega` that uses `omega_hal` (docs/design.md, "Layers").
//!
//! The session (its memory, its launches, its latch), the command-list core, the job engine, the cubin
//! loader, device printf, the platform install, the repository's demo kernels and the preflight check.
//! The typed API (`crate::api`) and the C layer (`crate::ffi`) reach the device only through what this
//! module makes public; neither names `omega_hal`.

// What only the C layer uses, which loom builds leave out (src/ffi/mod.rs says why).
#[cfg(not(loom))]
pub(crate) mod c_abi;
pub mod cmdlist;
#[cfg(all(target_os = "linux", feature = "nvidia"))]
pub mod doctor;
pub mod engine;
pub mod error;
pub mod kernels;
pub(crate) mod loader;
pub mod platform;
pub mod printf;
pub mod session;
pub(crate) mod sync;
pub mod testing;

/// TMA descriptors encoded on the host, byte for byte the driver's (`omega_hal::tma`): a kernel that
/// reads its operands with `cp.async.bulk.tensor` takes them in a buffer or as a parameter. Pure data, so
/// the shells and the libraries use it as the core does.
pub mod tma {
    pub use omega_hal::tma::*;
}

#[cfg(all(test, loom))]
mod loom_models;
