//! The device-memory service: allocate and free device-visible buffers with rights and a cache policy,
//! each with a GPU virtual address and (where the rights allow) a CPU view.

use crate::caps::BufferDesc;
use crate::error::HalError;

/// One device-visible buffer as a platform hands it out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocation {
    /// Platform-private identity of the allocation (never 0).
    pub id: u64,
    /// CPU view (`OmegaCpuView`); null when the buffer has none.
    pub cpu: *mut u8,
    /// GPU virtual address (`OmegaGpuVa`).
    pub va: u64,
    /// Bytes of both views.
    pub bytes: u64,
}

// SAFETY: an Allocation is a description (addresses and a length), not access; every dereference of `cpu`
// happens in code that holds the session lock, which is what serialises use across threads.
unsafe impl Send for Allocation {}
// SAFETY: as above; sharing the description shares no access.
unsafe impl Sync for Allocation {}

/// How much device memory there is, and how much of it is free, as the device reports it now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemInfo {
    /// Bytes not allocated by anyone (this process or another), at the moment of asking.
    pub free_bytes: u64,
    /// Bytes of device memory in all.
    pub total_bytes: u64,
}

/// Device-visible memory.
pub trait DeviceMemory: Send + Sync {
    /// Allocates a buffer for `desc`, which the caller has passed through
    /// [`check_buffer`](crate::caps::check_buffer) and rounded to the platform page.
    ///
    /// # Safety
    /// - The device is open (the [`Device`](crate::device::Device) service's `open` succeeded and no
    ///   `close` followed).
    /// - The caller holds the session lock.
    unsafe fn alloc(&self, desc: &BufferDesc) -> Result<Allocation, HalError>;

    /// Releases `a`: both views become invalid.
    ///
    /// # Safety
    /// - `a` came from `alloc` on this platform since the last open and was not freed since.
    /// - No submitted work may still touch it: its last launch completed with both markers observed.
    ///   After an uncertain completion nothing may be freed at all (the session parks it instead).
    /// - The caller holds the session lock.
    unsafe fn free(&self, a: &Allocation);

    /// Free and total device memory, from the platform's own accounting (the driver's on a GPU). A
    /// platform that cannot say refuses with [`HalError::Unsupported`]; nothing is estimated.
    ///
    /// # Safety
    /// - The device is open and the caller holds the session lock.
    unsafe fn mem_info(&self) -> Result<MemInfo, HalError> {
        Err(HalError::Unsupported("this platform does not report free device memory".into()))
    }

    /// Copies `dst.len()` bytes from `offset` bytes into `a` as the device's memory holds them now, read by
    /// the CPU directly with no engine of the device involved (no channel, no copy engine): what a
    /// recovery samples, after [`Device::stop`](crate::device::Device::stop), to see whether work still
    /// writes. A platform that has no direct view of that memory refuses with [`HalError::Unsupported`]
    /// (the caller counts the buffer as not watched); nothing is estimated.
    ///
    /// # Safety
    /// - The device is open and the caller holds the session lock.
    /// - `a` came from `alloc` on this platform since the last open and was not freed since, and
    ///   `offset + dst.len() <= a.bytes`.
    unsafe fn peek(&self, a: &Allocation, offset: u64, dst: &mut [u8]) -> Result<(), HalError> {
        let _ = (a, offset, dst);
        Err(HalError::Unsupported("this platform cannot read device memory without the device".into()))
    }
}
