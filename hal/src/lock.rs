//! The lock service: process-wide, non-recursive locks by id. Lock [`SESSION_LOCK_ID`] is the session lock
//! of the contract; every call sequence that touches the device runs under it.

use crate::sync::{self, Condvar, Mutex};

/// The session lock's id (`OMEGA_GPU_SESSION_LOCK_ID`).
pub const SESSION_LOCK_ID: u32 = 0;
/// How many lock ids a platform provides.
pub const LOCK_COUNT: usize = 4;

/// Process-wide locks. Non-recursive: a thread that takes a lock it holds waits forever.
pub trait ProcessLock: Send + Sync {
    /// Blocks until lock `id` is free, then takes it.
    ///
    /// # Panics
    /// On an `id` of [`LOCK_COUNT`] or more: ids are compile-time constants of the callers.
    fn lock(&self, id: u32);
    /// Takes lock `id` if it is free; true when taken.
    fn try_lock(&self, id: u32) -> bool;
    /// Releases lock `id`.
    ///
    /// # Safety
    /// - The calling context holds lock `id` (took it with `lock` or a successful `try_lock`) and has not
    ///   released it since; releasing a lock someone else holds breaks their exclusion.
    unsafe fn unlock(&self, id: u32);
}

/// The reference lock: a plain mutex-and-condvar per id, as the contract's Linux reference uses a plain
/// (non-recursive) pthread mutex. Built on the `sync` facade so loom sees it.
#[derive(Default)]
pub struct PlainLock {
    held: Mutex<[bool; LOCK_COUNT]>,
    freed: Condvar,
}

impl PlainLock {
    /// All locks free.
    pub fn new() -> Self {
        Self { held: Mutex::new([false; LOCK_COUNT]), freed: Condvar::new() }
    }
}

impl ProcessLock for PlainLock {
    fn lock(&self, id: u32) {
        let id = id as usize;
        let mut held = sync::lock(&self.held);
        while held[id] {
            held = self.freed.wait(held).unwrap_or_else(|p| p.into_inner());
        }
        held[id] = true;
    }

    fn try_lock(&self, id: u32) -> bool {
        let mut held = sync::lock(&self.held);
        let id = id as usize;
        if held[id] {
            return false;
        }
        held[id] = true;
        true
    }

    unsafe fn unlock(&self, id: u32) {
        let mut held = sync::lock(&self.held);
        debug_assert!(held[id as usize], "unlock of a free lock {id}");
        held[id as usize] = false;
        drop(held);
        self.freed.notify_all();
    }
}
