//! Driver calls, counted, and the seal that refuses them.
//!
//! A serving process proves that, once warm, it asks the driver for nothing: every call a platform makes
//! into its driver (on nvidia each ioctl, by request, and each mmap and munmap; on the simulator its
//! equivalents: an allocation, a free, a memory query) goes through [`DriverCounters::enter`], which counts
//! it, or refuses it while the counters are sealed ([`HalError::Sealed`]), so a call the seal forbids is
//! never made behind the caller's back. An unmap is counted but never refused: it runs in teardown paths
//! that cannot fail, and a test that compares the counters sees it.
//!
//! The counters use std's atomics and mutex rather than the crate's `sync` facade: the nvidia platform's
//! are a `static` (every ioctl of the process passes one free function), which needs const constructors,
//! and no protocol the loom models check runs through them.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::HalError;

/// One call into the driver, as the seal names it when it refuses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DriverCall {
    /// An ioctl, by its request's name (`RM_ALLOC`, `UVM_FREE`, ...).
    Ioctl(&'static str),
    /// A mapping of `bytes` (a driver object's CPU view, or anonymous pages the driver is given).
    Mmap {
        /// Its length.
        bytes: u64,
    },
    /// A device allocation of `bytes` (the simulator's equivalent of the driver's allocation calls).
    Alloc {
        /// Its size.
        bytes: u64,
    },
    /// A device free (the simulator's equivalent).
    Free,
    /// A device memory query (the simulator's equivalent of the driver's memory-info control call).
    MemInfo,
}

impl std::fmt::Display for DriverCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DriverCall::Ioctl(name) => write!(f, "ioctl {name}"),
            DriverCall::Mmap { bytes } => write!(f, "mapping of {bytes} bytes"),
            DriverCall::Alloc { bytes } => write!(f, "allocation of {bytes} bytes"),
            DriverCall::Free => f.write_str("free"),
            DriverCall::MemInfo => f.write_str("memory query"),
        }
    }
}

/// What a platform asked its driver for so far ([`DriverCounters::stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DriverStats {
    /// Every ioctl made (the simulator: every allocation, free and memory query).
    pub ioctls: u64,
    /// Mappings made.
    pub mmaps: u64,
    /// Mappings released.
    pub munmaps: u64,
    /// Calls the seal refused (made by no one).
    pub refused: u64,
    /// `ioctls` by request name, in the order each name was first seen.
    pub by_kind: Vec<(&'static str, u64)>,
}

impl DriverStats {
    /// Every call that reached the driver: ioctls, mappings and unmappings.
    pub fn calls(&self) -> u64 {
        self.ioctls + self.mmaps + self.munmaps
    }
}

/// A platform's driver counters and its seal.
#[derive(Debug)]
pub struct DriverCounters {
    sealed: AtomicBool,
    mmaps: AtomicU64,
    munmaps: AtomicU64,
    refused: AtomicU64,
    /// Ioctls by name; a handful of names, so a list beats a map.
    ioctls: Mutex<Vec<(&'static str, u64)>>,
}

impl Default for DriverCounters {
    fn default() -> Self {
        Self::new()
    }
}

impl DriverCounters {
    /// Zero counts, unsealed.
    pub const fn new() -> Self {
        DriverCounters {
            sealed: AtomicBool::new(false),
            mmaps: AtomicU64::new(0),
            munmaps: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            ioctls: Mutex::new(Vec::new()),
        }
    }

    /// Called just before `call` is made: counts it, or refuses it (and counts the refusal) while sealed.
    pub fn enter(&self, call: DriverCall) -> Result<(), HalError> {
        if self.is_sealed() {
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(HalError::Sealed(call));
        }
        match call {
            DriverCall::Mmap { .. } => {
                self.mmaps.fetch_add(1, Ordering::Relaxed);
            }
            DriverCall::Ioctl(name) => self.count(name),
            DriverCall::Alloc { .. } => self.count("alloc"),
            DriverCall::Free => self.count("free"),
            DriverCall::MemInfo => self.count("mem info"),
        }
        Ok(())
    }

    /// Called just before a mapping is released: counted, never refused (see the module's text).
    pub fn unmapped(&self) {
        self.munmaps.fetch_add(1, Ordering::Relaxed);
    }

    fn count(&self, name: &'static str) {
        // A panic elsewhere while the list was held leaves it whole (an increment or a push), so a poisoned
        // lock is taken as it is.
        let mut v = self.ioctls.lock().unwrap_or_else(|p| p.into_inner());
        match v.iter_mut().find(|(n, _)| *n == name) {
            Some((_, c)) => *c += 1,
            None => v.push((name, 1)),
        }
    }

    /// Seals (`true`) or unseals the driver: while sealed, [`DriverCounters::enter`] refuses every call.
    pub fn set_sealed(&self, sealed: bool) {
        self.sealed.store(sealed, Ordering::SeqCst);
    }

    /// Whether the driver is sealed.
    pub fn is_sealed(&self) -> bool {
        self.sealed.load(Ordering::SeqCst)
    }

    /// The counts so far.
    pub fn stats(&self) -> DriverStats {
        let by_kind = self.ioctls.lock().unwrap_or_else(|p| p.into_inner()).clone();
        DriverStats {
            ioctls: by_kind.iter().map(|(_, c)| c).sum(),
            mmaps: self.mmaps.load(Ordering::Relaxed),
            munmaps: self.munmaps.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            by_kind,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_counted_by_kind_and_refused_while_sealed() {
        let c = DriverCounters::new();
        c.enter(DriverCall::Ioctl("RM_ALLOC")).unwrap();
        c.enter(DriverCall::Ioctl("RM_ALLOC")).unwrap();
        c.enter(DriverCall::Ioctl("RM_FREE")).unwrap();
        c.enter(DriverCall::Mmap { bytes: 4096 }).unwrap();
        c.unmapped();
        let before = c.stats();
        assert_eq!(before.by_kind, vec![("RM_ALLOC", 2), ("RM_FREE", 1)]);
        assert_eq!((before.ioctls, before.mmaps, before.munmaps, before.calls()), (3, 1, 1, 5));
        c.set_sealed(true);
        let e = c.enter(DriverCall::Alloc { bytes: 4096 }).unwrap_err();
        assert_eq!(e.to_string(), "serving sealed: allocation of 4096 bytes would ask the driver");
        let after = c.stats();
        assert_eq!(after.refused, 1);
        assert_eq!(after.calls(), before.calls(), "a refused call is not made");
        c.set_sealed(false);
        c.enter(DriverCall::Free).unwrap();
        assert_eq!(c.stats().ioctls, 4);
    }
}
