//! What the C layer (`src/ffi`) names of the platform contract: its C types, its constants and its pure
//! checks (of a table, of a buffer descriptor, of a handle table), each defined once in the HAL
//! (`omega_hal::ctable` and the HAL's root) and named here, so that the C layer has this one door to them
//! and none to the HAL itself (docs/design.md, "Layers"). Nothing here reaches an installed platform;
//! what does (installing a table, the simulator's table) is [`crate::platform`]'s.

pub use omega_hal::ctable::{
    caps_of, check_for, err, fit, order, write_c_text, OmegaGpuBufferDesc, OmegaGpuDeviceInfo, OmegaGpuHandleTable,
    OmegaGpuPlatform, OpenRefused, TableRefusal,
};
pub use omega_hal::{
    negotiate, BufferKind, CachePolicy, CodeFormat, Handle, HandleError, Refusal, Rights, Services, PLATFORM_ABI_MAJOR,
    PLATFORM_ABI_MINOR,
};
