//! The device service: open and close the device, and say what it is.

use crate::error::HalError;

/// What the device query reports.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct DeviceInfo {
    /// Marketing name ("NVIDIA H200", "Omega simulated GPU").
    pub name: String,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Device memory in bytes.
    pub memory_bytes: u64,
    /// Compute capability major (9 for Hopper).
    pub arch_major: u32,
    /// Compute capability minor.
    pub arch_minor: u32,
    /// Kernel driver version ("580.159.04"), or the simulator's version.
    pub driver_version: String,
    /// PCI location and ids ("0000:00:05.0 10de:2335"), empty where there is no bus.
    pub pci: String,
}

/// Device open, close and query.
pub trait Device: Send + Sync {
    /// Opens the device: after success every other service may be used.
    ///
    /// # Safety
    /// - The caller holds the session lock and the device is not open.
    unsafe fn open(&self) -> Result<DeviceInfo, HalError>;

    /// Closes the device and releases everything the platform holds for it.
    ///
    /// # Safety
    /// - The caller holds the session lock, the device is open, no submitted work may still run (every
    ///   submission's markers were observed), and every allocation was freed: nothing may be closed after
    ///   an uncertain completion.
    unsafe fn close(&self);
}
