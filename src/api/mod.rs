//! The typed shell over the core: the lock and scope tokens, typed buffers ([`Mem`](crate::Mem)), kernels
//! and modules, the launch builder and its argument layout, and the typed command list. Every check is the
//! core's; what this layer adds is types that make the misuse the core would refuse fail to compile. It
//! never names `omega_hal` (docs/design.md, "Layers").

pub mod args;
pub(crate) mod cmdlist;
pub(crate) mod kept;
pub mod kernel;
pub mod launch;
pub(crate) mod locked;
pub mod mem;
pub(crate) mod scope;
pub mod state;
