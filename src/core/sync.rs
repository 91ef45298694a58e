//! The one place `omega` takes its locks, atomics and threads from, so `--cfg loom` model-checks every
//! one of them (the facade shape of tokio's `loom` module). Nothing else in this crate imports
//! `std::sync` or `std::thread` directly.

pub(crate) use omega_hal::sync::{lock, thread, Arc, AtomicBool, AtomicU32, Mutex, Ordering};

/// Process singletons (the runtime `runtime()` returns, the engine's globals). loom cannot model a static's
/// one-time initialisation; the models build their own `Runtime` instead.
pub(crate) use std::sync::OnceLock;

/// Process-wide registries (which runtime holds which platform instance): std's even under loom, like
/// `OnceLock`, because loom cannot model a static; each model builds its own platform, so no model races
/// on an entry. `Weak` is std's because the facade's `Arc` is std's too.
pub(crate) use std::sync::{Mutex as ProcessMutex, Weak};
