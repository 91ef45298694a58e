//! # Omega
//!
//! A GPU compute runtime that drives NVIDIA GPUs through the open kernel driver — no CUDA library at run
//! time — behind a written contract, the Omega Runtime API ([`API_VERSION`],
//! `docs/runtime/omega_runtime_api.md`). Design choices:
//!
//! 1. **Two layers.** [`omega_hal`] is the thin, unsafe platform layer (a table of services, backends
//!    `sim` and `nvidia`; the latter behind the cargo feature `nvidia`, on by default). This crate owns
//!    every check and all typestate; inside it only the core (`src/core`) uses the HAL, and the typed API
//!    (`src/api`), the C layer (`src/ffi`) and the model libraries (`src/libs`) sit on the core
//!    (docs/design.md, "Layers"). Tests reach the simulator through [`testing`].
//! 2. **One runtime core, two shells.** [`session::Runtime`] implements the contract's semantics once,
//!    checked at run time (it is what C callers get). The typed API is a shell over it whose types make
//!    the misuse the runtime would refuse fail to compile instead.
//! 3. **Tokens for the lock, the open device and the latch.** [`lock()`] gives `Locked<Closed>`;
//!    `open()` gives `Locked<Open>`; an uncertain completion ends a scope in [`Latched`], which has no
//!    launch, close or open. The tokens are zero-sized, not `Send`, released on drop.
//! 4. **Buffers are bound to their scope** ([`Mem<'s, K>`]): they cannot outlive it, and their kind and
//!    element type are part of their type. Launches are synchronous, so a scope's end means the device is
//!    done with its buffers — or the process latched and they are parked forever.
//! 5. **Errors name their stage** ([`Error::stage`]); nothing fails silently and nothing falls back.
//! 6. **One `sync` facade**, so loom sees every lock and atomic.
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dev = omega::lock().open()?;
//! println!("platform {} device {}", dev.platform(), dev.device().name);
//! let out = dev.scope(|s, gpu| -> Result<Vec<f32>, omega::Error> {
//!     let a = s.alloc_from(&[1.0f32, 2.0, 3.0])?;
//!     let b = s.alloc_from(&[10.0f32, 20.0, 30.0])?;
//!     let mut c = s.alloc::<f32>(3)?;
//!     let k = s.load("vector_add")?;
//!     let l = omega::Launch::new(&k).grid([1, 1, 1]).block([32, 1, 1]).arg(&a).arg(&b).arg(&c).arg(3u32);
//!     gpu.launch(&l)?;
//!     c.to_vec()
//! });
//! println!("{:?}", out.value()?);
//! # Ok(()) }
//! ```

#![warn(missing_docs)]

// The derives and `kernel!` expand to `::omega::...` paths; this makes them resolve inside omega too.
extern crate self as omega;

// The layers (docs/design.md, "Layers"): `core` alone uses `omega_hal`; `api` and `ffi` are shells over it;
// `libs` sits on `api`. The folders are the layers; the paths below keep every public path that programs,
// tests and docs use (`omega::session`, `omega::cmdlist`, ...) where it was.
mod api;
mod core;
pub mod ffi;
pub mod libs;

pub use crate::api::{args, kernel, launch, mem, state};
pub(crate) use crate::api::{kept, locked, scope};
#[cfg(all(target_os = "linux", feature = "nvidia"))]
pub use crate::core::doctor;
pub use crate::core::{engine, error, kernels, platform, printf, session, testing, tma};
pub(crate) use crate::core::{loader, sync};

/// # Command lists (EXPERIMENTAL)
///
/// The core ([`CmdList`], the contract's `omega_gpu_cmdlist_*` one to one) and the typed shell
/// ([`CmdListBuilder`]); the design is described in the core's module (`src/core/cmdlist/mod.rs`) and in
/// docs/cmdlist-and-engine.md.
pub mod cmdlist {
    pub use crate::api::cmdlist::{CmdListBuilder, SubmitError, Submitted};
    pub use crate::core::cmdlist::*;
}

pub use crate::core::session::DeviceInfo;
pub use args::LaunchArgs;
pub use error::{Error, LaunchArgError, RecoverError, Result, SettingError, Stage};
/// The half-precision scalars (`bf16`, `f16`) that buffers and arguments may hold.
pub use half;
pub use kept::{Kept, KeptModule};
pub use kernel::{Kernel, Module};
pub use launch::{ArgBlock, KernelArg, Launch};
pub use locked::{lock, try_lock, Latched, Locked, OpenError, RecoverFailed};
pub use mem::Mem;
/// `#[derive(LaunchArgs)]` and `kernel!`: see [`args`].
pub use omega_macros::{kernel, LaunchArgs};
pub use platform::PlatformKind;
pub use scope::{Gpu, LaunchError, Launched, Scope, Scoped};
pub use state::{Cached, Closed, Code, Data, Device, DeviceScalar, MemKind, Open};

/// The README's Rust program, compiled and run as a doctest so that it cannot drift from the API.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeProgram;

/// The library's version (the crate version; the contract's API version is [`API_VERSION`]).
pub fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// The runtime API version this library implements, `(major, minor)`: the document's first line
/// (docs/runtime/omega_runtime_api.md, whose section 2 lists every place a version bump touches).
pub const API_VERSION: (u32, u32) = (0, 2);
