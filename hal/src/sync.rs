//! The one place this crate takes its locks and atomics from, so that `--cfg loom` swaps every one of them
//! for loom's model-checked twin (tokio's `loom` facade shape). Nothing else in `omega-hal` imports
//! `std::sync` or `std::thread`.

#[cfg(loom)]
pub use loom::sync::{
    atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering},
    Condvar, Mutex, MutexGuard,
};
#[cfg(loom)]
pub use loom::thread;
// std's Arc even under loom: the platform table is `Arc<dyn Platform>` and host kernels are
// `Arc<dyn Fn ..>`, and loom's Arc cannot coerce to a trait object (`CoerceUnsized` is unstable). Reference
// counts synchronise nothing the models check; every lock and atomic inside is still loom's.
#[cfg(loom)]
pub use std::sync::Arc;

#[cfg(not(loom))]
pub use std::sync::{
    atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering},
    Arc, Condvar, Mutex, MutexGuard,
};
#[cfg(not(loom))]
pub use std::thread;

/// Takes a std-shaped mutex, treating poisoning as still-usable state: every structure this crate guards
/// stays consistent across a panic (updates are single assignments), and a poisoned platform lock must not
/// turn into a second failure in an unrelated thread.
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    #[cfg(loom)]
    {
        m.lock().unwrap()
    }
    #[cfg(not(loom))]
    {
        m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// Waits on a condition variable with a guard of [`lock`], treating poisoning as [`lock`] does.
pub fn wait<'a, T>(c: &Condvar, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
    #[cfg(loom)]
    {
        c.wait(guard).unwrap()
    }
    #[cfg(not(loom))]
    {
        c.wait(guard).unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
