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

    /// Copies `src` into the device side of `a` at `offset`, whatever its CPU view holds: how a buffer
    /// without a CPU view (a device-only buffer) is written. The bytes are visible to the GPU on return.
    ///
    /// A platform that cannot move bytes to the device side refuses with [`HalError::Unsupported`].
    ///
    /// # Safety
    /// - `a` is a live allocation of this platform and `offset + src.len() <= a.bytes`.
    /// - No submitted work is running (the session's launches are synchronous; the caller holds the lock).
    unsafe fn write_device(&self, a: &Allocation, offset: u64, src: &[u8]) -> Result<(), HalError> {
        let _ = (a, offset, src);
        Err(HalError::Unsupported("this platform cannot write a buffer's device side directly".into()))
    }

    /// Copies the device side of `a` at `offset` into `dst`: how a buffer without a CPU view is read.
    ///
    /// # Safety
    /// Same as [`Visibility::write_device`], with `offset + dst.len() <= a.bytes`.
    unsafe fn read_device(&self, a: &Allocation, offset: u64, dst: &mut [u8]) -> Result<(), HalError> {
        let _ = (a, offset, dst);
        Err(HalError::Unsupported("this platform cannot read a buffer's device side directly".into()))
    }
}
