//! The model libraries (matmul, attention, elementwise, decoder, serving) go here, one module each, and what they
//! share: [`call`], the `Done` / `Failed` a call hands back.
//!
//! A library is written against the typed API only — [`crate::lock`], [`crate::Scope`], [`crate::Mem`],
//! [`crate::Launch`], [`crate::cmdlist::CmdListBuilder`] — exactly as a program outside this crate would
//! use it. It may not use the core (`crate::core`), the C layer (`crate::ffi`) or `omega_hal`: what a
//! library needs of the device that the typed API lacks is added to the typed API, for every caller
//! (docs/design.md, "Layers"; `tests/layers.rs` enforces the `omega_hal` part). What a library keeps
//! between scopes (a loaded module, a workspace) it keeps as [`crate::Kept`] and [`crate::KeptModule`].

pub mod attention;
pub mod call;
pub mod decoder;
pub mod elementwise;
pub mod matmul;
pub mod serving;
