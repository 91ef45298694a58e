//! The platform layer's errors: only what a caller cannot anticipate. Validation is the session layer's
//! job and never reaches a platform.

use crate::caps::Refusal;

/// A platform service failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HalError {
    /// No device of this platform is present (or its files cannot be opened).
    #[error("no device: {0}")]
    NoDevice(String),
    /// The device ran out of memory for this request.
    #[error("out of device memory ({bytes} bytes requested)")]
    OutOfMemory {
        /// Bytes asked for.
        bytes: u64,
    },
    /// The kernel driver refused a call; `detail` carries the driver's own words.
    #[error("driver refused {call}: {detail}")]
    Driver {
        /// The call that failed (ioctl or RM object).
        call: &'static str,
        /// The driver status (NV_STATUS) or errno.
        status: u32,
        /// The driver's text for it.
        detail: String,
    },
    /// The driver's version is not one this build knows the ABI of.
    #[error("unsupported driver: {0}")]
    UnsupportedDriver(String),
    /// The platform contract refused a descriptor.
    #[error("{0}")]
    Refused(#[from] Refusal),
    /// A fault injected on the simulated platform.
    #[error("injected fault: {0}")]
    Injected(&'static str),
    /// The device was lost (channel torn down, GPU fallen off the bus).
    #[error("device lost: {0}")]
    Lost(String),
    /// The platform cannot do this at all (a missing capability, never emulated).
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The driver is sealed for serving ([`crate::driver`]): the call was refused, never made.
    #[error("serving sealed: {0} would ask the driver")]
    Sealed(crate::driver::DriverCall),
}
