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

/// What [`Device::stop`] did: the platform's calls that stopped the work, each of which reported success,
/// and what the channel read afterwards.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Stopped {
    /// The calls, in the order made ("NVA06F_CTRL_CMD_STOP_CHANNEL", "RM_FREE GPFIFO channel", ...).
    pub steps: Vec<&'static str>,
    /// What the channel reported after the stop, for reports (the error notifier's entry on the GPU).
    pub channel: String,
}

/// Why [`Device::stop`] could not stop the work: the step that failed and what the platform said. The
/// work may still run; nothing may be released.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{step}: {source}")]
pub struct StopFailure {
    /// The step ("NVA06F_CTRL_CMD_STOP_CHANNEL", "RM_FREE channel group", "stop").
    pub step: &'static str,
    /// What the platform said.
    #[source]
    pub source: HalError,
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

    /// Stops every piece of work submitted since the device opened and tears down what ran it (on the GPU
    /// the channel and its group), so that no engine of the device runs this process's work any more —
    /// for a session recovering from an uncertain completion. Frees no memory: the session samples the
    /// memory the work could write ([`DeviceMemory::peek`](crate::memory::DeviceMemory::peek)) and only
    /// then closes. After it returns `Ok`, nothing may be submitted: `close` is the next call. Calling it
    /// again after an `Ok` repeats nothing and reports the same steps. A platform that cannot stop work
    /// refuses (the default), and the session stays latched.
    ///
    /// # Safety
    /// - The caller holds the session lock and the device is open.
    unsafe fn stop(&self) -> Result<Stopped, StopFailure> {
        Err(StopFailure {
            step: "stop",
            source: HalError::Unsupported("this platform cannot stop submitted work".into()),
        })
    }
}
