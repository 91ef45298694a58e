//! Visibility sync through a C table (the SYNC service).

use super::{f, OmegaGpuAllocation, OmegaGpuPlatformError, TablePlatform};
use crate::error::HalError;
use crate::memory::Allocation;
use crate::Visibility;

/// A function of OmegaGpuSyncService: `to_gpu` or `to_cpu`.
type SyncFn = unsafe extern "C" fn(
    *mut core::ffi::c_void,
    *const OmegaGpuAllocation,
    u64,
    u64,
    *mut OmegaGpuPlatformError,
) -> i32;

impl TablePlatform {
    /// Calls `sync` on the range.
    ///
    /// # Safety
    /// - Visibility's contract: `a` is live, the range lies in it, nothing runs, the lock is held.
    unsafe fn sync(&self, sync: SyncFn, a: &Allocation, offset: u64, len: u64) -> Result<(), HalError> {
        let c = OmegaGpuAllocation::from_hal(a);
        let mut err = OmegaGpuPlatformError::NONE;
        // SAFETY: the caller keeps Visibility's contract, which is the rule of OmegaGpuSyncService's
        // functions; `c` and `err` are live locals for the call.
        match unsafe { sync(self.ctx(), &c, offset, len, &mut err) } {
            0 => Ok(()),
            _ => Err(err.to_hal("sync", 0)),
        }
    }
}

impl Visibility for TablePlatform {
    unsafe fn sync_to_gpu(&self, a: &Allocation, offset: u64, len: u64) -> Result<(), HalError> {
        // SAFETY: forwarded from the caller (Visibility::sync_to_gpu's contract).
        unsafe { self.sync(f(self.table.sync.to_gpu), a, offset, len) }
    }

    unsafe fn sync_to_cpu(&self, a: &Allocation, offset: u64, len: u64) -> Result<(), HalError> {
        // SAFETY: forwarded from the caller (Visibility::sync_to_cpu's contract).
        unsafe { self.sync(f(self.table.sync.to_cpu), a, offset, len) }
    }
}
