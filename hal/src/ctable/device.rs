//! Device open and close through a C table (the DEVICE service), and the device report as C lays it out.

use super::{f, read_c_text, write_c_text, OmegaGpuDeviceInfo, OmegaGpuPlatformError, TablePlatform};
use crate::device::{Device, DeviceInfo};
use crate::error::HalError;

const _: () = assert!(core::mem::size_of::<OmegaGpuDeviceInfo>() == 23 * 8);

impl OmegaGpuDeviceInfo {
    /// All zero: empty texts, no device.
    pub const NONE: OmegaGpuDeviceInfo = OmegaGpuDeviceInfo {
        name: [0; 64],
        driver_version: [0; 32],
        pci: [0; 64],
        sm_count: 0,
        arch_major: 0,
        arch_minor: 0,
        reserved: 0,
        memory_bytes: 0,
    };

    /// `d` as C lays it out, texts cut to fit.
    pub fn from_info(d: &DeviceInfo) -> Self {
        let mut out = Self::NONE;
        write_c_text(&mut out.name, &d.name);
        write_c_text(&mut out.driver_version, &d.driver_version);
        write_c_text(&mut out.pci, &d.pci);
        out.sm_count = d.sm_count;
        out.arch_major = d.arch_major;
        out.arch_minor = d.arch_minor;
        out.memory_bytes = d.memory_bytes;
        out
    }

    /// The report in the HAL's terms.
    pub fn to_info(&self) -> DeviceInfo {
        DeviceInfo {
            name: read_c_text(&self.name),
            sm_count: self.sm_count,
            memory_bytes: self.memory_bytes,
            arch_major: self.arch_major,
            arch_minor: self.arch_minor,
            driver_version: read_c_text(&self.driver_version),
            pci: read_c_text(&self.pci),
        }
    }
}

impl Device for TablePlatform {
    unsafe fn open(&self) -> Result<DeviceInfo, HalError> {
        let mut info = OmegaGpuDeviceInfo::NONE;
        let mut err = OmegaGpuPlatformError::NONE;
        // SAFETY: the caller holds the session lock and the device is not open (Device::open's contract),
        // OmegaGpuDeviceService's `open` rule; `info` and `err` are live locals for the call.
        match unsafe { f(self.table.device.open)(self.ctx(), &mut info, &mut err) } {
            0 => Ok(info.to_info()),
            _ => Err(err.to_hal("open", 0)),
        }
    }

    unsafe fn close(&self) {
        // SAFETY: lock held, device open, nothing running, every buffer freed, not after an uncertain
        // completion (Device::close's contract): OmegaGpuDeviceService's `close` rule.
        unsafe { f(self.table.device.close)(self.ctx()) }
    }
}
