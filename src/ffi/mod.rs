//! The C layer: the contract's `extern "C"` functions, structs and constants, over
//! [`crate::session::Runtime`].
//!
//! Design choices:
//!
//! 1. **No logic of its own.** Every check the contract describes (the lock, the latch, handles, launch
//!    arguments) lives once in the runtime core; a function here converts pointers to references, calls
//!    the core, and hands its `Result` to [`boundary`], which turns a [`crate::Error`] into the contract's
//!    return value and records its text, once, as what `omega_gpu_session_last_error` returns. The core
//!    records nothing; the text is the `Error`'s own, so a C caller reads the stage a Rust caller holds.
//! 2. **One module per header.** `runtime_api.rs` is `omega_runtime_api.h`, `session.rs` is
//!    `omega_gpu_session.h`, and so on; `tools/headers.list` names each header's sources and
//!    `tools/gen_headers.sh` runs a pinned cbindgen over them. The headers are committed and CI regenerates
//!    them and fails on any difference.
//! 3. **Nothing crosses the boundary unchecked.** Every function runs inside [`boundary::guard`]: a panic
//!    becomes the function's failure value (-1, NULL, 0) with the text `internal: panic in <function>`.
//!    A NULL pointer where the contract needs an object is a named failure, never a dereference.
//! 4. **The lock discipline is the contract's** (docs/lock-discipline.md): calls that touch the device
//!    need the calling thread to hold the session lock and refuse (stage `lock`) when it does not;
//!    `omega_gpu_session_close` takes the lock itself; `omega_gpu_session_cancel` and
//!    `omega_gpu_session_is_blocked` are single atomics, safe from any thread without it.
//! 5. **Constants are written out here**, not taken from the core by path, because cbindgen copies a
//!    constant's expression into the header; each one is asserted equal to the core's at compile time.

// The C layer has nothing to model-check, and its statics need const constructors loom does not have.
#![cfg(not(loom))]

pub mod attention;
pub mod boundary;
pub mod cmdlist;
pub mod code_alloc;
pub mod elementwise;
pub mod engine;
pub mod kernel;
pub mod matmul;
pub mod platform;
pub mod runtime_api;
pub mod serving;
pub mod session;
