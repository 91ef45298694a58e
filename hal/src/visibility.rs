//! The CPU/GPU visibility service: what makes CPU writes visible to the GPU and GPU writes visible to the
//! CPU. On a discrete GPU this moves bytes between the CPU view and device memory.

use crate::error::HalError;
use crate::memory::Allocation;

/// Visibility sync of a buffer range.
pub trait Visibility: Send + Sync {
    /// Makes CPU writes to `a.cpu[offset..offset+len]` visible to the GPU.
    ///
    /// # Safety
    /// - `a` is a live allocation of this platform and `offset + len <= a.bytes`.
    /// - No submitted work is running (the session's launches are synchronous; the caller holds the lock).
    unsafe fn sync_to_gpu(&self, a: &Allocation, offset: u64, len: u64) -> Result<(), HalError>;

    /// Makes GPU writes to the range visible in `a.cpu`.
    ///
    /// # Safety
    /// Same as [`Visibility::sync_to_gpu`].
    unsafe fn sync_to_cpu(&self, a: &Allocation, offset: u64, len: u64) -> Result<(), HalError>;
}
