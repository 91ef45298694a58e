//! Capability negotiation: the platform ABI number, the service set, buffer rights and cache policy, and
//! the refusal names every check returns.
//!
//! The contract's promises, enforced here: every byte range carries a length and rights; anything the CPU
//! polls is [`Rights::HOST_POLLED`] and must be GPU-uncached; a missing service is refused, never emulated.

use bitflags::bitflags;

/// Platform contract major number (`OMEGA_GPU_PLATFORM_ABI_MAJOR`). A change needs a runtime MAJOR bump.
pub const PLATFORM_ABI_MAJOR: u32 = 1;
/// Platform contract minor number (`OMEGA_GPU_PLATFORM_ABI_MINOR`).
pub const PLATFORM_ABI_MINOR: u32 = 2;

/// The least zero-filled tail after kernel code every code buffer gets, whatever the platform asks in
/// [`Caps::code_prefetch_tail`]: the runtime contract's `OMEGA_GPU_CODE_PREFETCH_TAIL` (2 KB since 0.1). A
/// platform whose instruction prefetcher reads further (NVIDIA's, [`crate::arch::CODE_PREFETCH_TAIL`])
/// asks for more.
pub const MIN_CODE_PREFETCH_TAIL: u64 = 2048;

bitflags! {
    /// The services of the platform table (`OMEGA_GPU_SVC_*`).
    #[repr(transparent)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Services: u32 {
        /// Monotonic nanosecond clock and sleep.
        const CLOCK = 1 << 0;
        /// The process-wide lock.
        const LOCK = 1 << 1;
        /// Device-visible memory with rights and cache policy.
        const DEVICE_MEM = 1 << 2;
        /// The submission queue.
        const SUBMIT = 1 << 3;
        /// Completion polling of marker words.
        const POLL = 1 << 4;
        /// CPU-only memory (for freestanding builds).
        const HOST_MEM = 1 << 5;
        /// CPU/GPU visibility sync of a buffer.
        const SYNC = 1 << 6;
        /// Device open/close and the device query.
        const DEVICE = 1 << 7;
    }
}

impl Services {
    /// What the session layer needs for open, alloc, launch and readback.
    pub const SESSION: Services = Services::CLOCK
        .union(Services::LOCK)
        .union(Services::DEVICE_MEM)
        .union(Services::SUBMIT)
        .union(Services::POLL)
        .union(Services::SYNC)
        .union(Services::DEVICE);
}

bitflags! {
    /// Access rights carried by every byte range (`OMEGA_GPU_RIGHT_*`).
    #[repr(transparent)]
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct Rights: u32 {
        /// The CPU may read its view.
        const CPU_READ = 1 << 0;
        /// The CPU may write its view.
        const CPU_WRITE = 1 << 1;
        /// The GPU may read.
        const GPU_READ = 1 << 2;
        /// The GPU may write.
        const GPU_WRITE = 1 << 3;
        /// The GPU may execute (kernel code).
        const GPU_EXEC = 1 << 4;
        /// The CPU polls words the GPU writes here: must be GPU-uncached.
        const HOST_POLLED = 1 << 5;
    }
}

/// GPU cache policy of a buffer (`OMEGA_GPU_CACHE_*`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CachePolicy {
    /// GPU-uncached: CPU writes and GPU writes meet in memory without a cache flush.
    Uncached = 0,
    /// GPU-cached: correct only for write-once, GPU-read-only, never-polled contents.
    Cached = 1,
}

/// The handle kinds (`OMEGA_GPU_HANDLE_*`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufferKind {
    /// An ordinary data buffer.
    Data = 1,
    /// Kernel machine code.
    Code = 2,
    /// A queue buffer of the session's own (ring, markers, descriptors).
    Queue = 3,
}

/// What a platform's GPU executes from a code buffer (`OMEGA_GPU_CODE_*`), so a loader knows what to write
/// there.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CodeFormat {
    /// The device's own machine code: a cubin's relocated image.
    Machine = 0,
    /// The simulator's code image naming a host kernel ([`crate::sim::code_image`]).
    SimImage = 1,
}

impl CodeFormat {
    /// The format of code `code` (`OMEGA_GPU_CODE_*`), if it is one.
    pub fn from_code(code: u32) -> Option<CodeFormat> {
        match code {
            0 => Some(CodeFormat::Machine),
            1 => Some(CodeFormat::SimImage),
            _ => None,
        }
    }
}

/// The names of the services in `s`, as C spells them: `OMEGA_GPU_SVC_POLL | OMEGA_GPU_SVC_SYNC`.
pub fn service_names(s: Services) -> String {
    let names: Vec<String> = s.iter_names().map(|(name, _)| format!("OMEGA_GPU_SVC_{name}")).collect();
    let unknown = s.bits() & !Services::all().bits();
    let mut text = names.join(" | ");
    if unknown != 0 {
        if !text.is_empty() {
            text.push_str(" | ");
        }
        text.push_str(&format!("{unknown:#x}"));
    }
    text
}

/// What a platform declares about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// ABI major the platform implements.
    pub abi_major: u32,
    /// ABI minor the platform implements.
    pub abi_minor: u32,
    /// Services present.
    pub services: Services,
    /// Allocation granule in bytes (a power of two).
    pub page_bytes: u64,
    /// Bytes of zero-filled tail after kernel code, for instruction prefetch. The session gives code buffers
    /// this many, at least [`MIN_CODE_PREFETCH_TAIL`].
    pub code_prefetch_tail: u64,
    /// Byte offset of the kernel parameters in constant bank 0.
    pub param_base: u32,
    /// Largest parameter block in bytes the constant bank allows.
    pub max_param_bytes: u32,
    /// What one launch descriptor may ask for (shape, registers, shared memory) on this device.
    pub launch: crate::queue::LaunchLimits,
}

/// Why the platform contract refused something (`OMEGA_GPU_PLAT_*`). Each has a fixed name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The platform's ABI major differs from the runtime's.
    #[error("OMEGA_GPU_PLAT_ABI_MAJOR: platform ABI {platform}.x, runtime needs {runtime}.x")]
    AbiMajor {
        /// The platform's major.
        platform: u32,
        /// The runtime's major.
        runtime: u32,
    },
    /// The platform's ABI minor is older than the runtime needs.
    #[error("OMEGA_GPU_PLAT_ABI_MINOR: platform ABI minor {platform} older than the runtime's {runtime}")]
    AbiMinor {
        /// The platform's minor.
        platform: u32,
        /// The runtime's minor.
        runtime: u32,
    },
    /// A needed service is absent. It is refused, never emulated.
    #[error("OMEGA_GPU_PLAT_MISSING_SERVICE: {}", service_names(*.0))]
    MissingService(Services),
    /// A buffer of zero bytes.
    #[error("OMEGA_GPU_PLAT_ZERO_LENGTH: a byte range needs a length")]
    ZeroLength,
    /// A buffer with no rights at all.
    #[error("OMEGA_GPU_PLAT_NO_RIGHTS: a byte range needs rights")]
    NoRights,
    /// A HOST_POLLED buffer asked to be GPU-cached.
    #[error("OMEGA_GPU_PLAT_POLLED_CACHED: a HOST_POLLED range must be GPU-uncached")]
    PolledCached,
    /// Code that the GPU could write.
    #[error("OMEGA_GPU_PLAT_EXEC_WRITABLE: GPU_EXEC and GPU_WRITE on one range")]
    ExecWritable,
    /// A length or address past what the platform can describe.
    #[error("OMEGA_GPU_PLAT_OVERFLOW: range too large")]
    Overflow,
    /// GPU-cached memory the GPU may write, or that the CPU polls.
    #[error("OMEGA_GPU_PLAT_CACHED_WRITABLE: GPU-cached ranges are GPU-read-only")]
    CachedWritable,
    /// A field that crossed from C holds a value the contract does not define (an unknown cache policy,
    /// kind, order or code format, a page size that is not a power of two); the field is named.
    #[error("OMEGA_GPU_PLAT_BAD_VALUE: {0} holds a value the contract does not define")]
    BadValue(&'static str),
}

impl Refusal {
    /// The refusal's fixed name, as the C layer reports it.
    pub fn name(&self) -> &'static str {
        match self {
            Refusal::AbiMajor { .. } => "OMEGA_GPU_PLAT_ABI_MAJOR",
            Refusal::AbiMinor { .. } => "OMEGA_GPU_PLAT_ABI_MINOR",
            Refusal::MissingService(_) => "OMEGA_GPU_PLAT_MISSING_SERVICE",
            Refusal::ZeroLength => "OMEGA_GPU_PLAT_ZERO_LENGTH",
            Refusal::NoRights => "OMEGA_GPU_PLAT_NO_RIGHTS",
            Refusal::PolledCached => "OMEGA_GPU_PLAT_POLLED_CACHED",
            Refusal::ExecWritable => "OMEGA_GPU_PLAT_EXEC_WRITABLE",
            Refusal::Overflow => "OMEGA_GPU_PLAT_OVERFLOW",
            Refusal::CachedWritable => "OMEGA_GPU_PLAT_CACHED_WRITABLE",
            Refusal::BadValue(_) => "OMEGA_GPU_PLAT_BAD_VALUE",
        }
    }

    /// The refusal's code (`OMEGA_GPU_PLAT_*`), 1 and up.
    pub fn code(&self) -> i32 {
        match self {
            Refusal::AbiMajor { .. } => 1,
            Refusal::AbiMinor { .. } => 2,
            Refusal::MissingService(_) => 3,
            Refusal::ZeroLength => 4,
            Refusal::NoRights => 5,
            Refusal::PolledCached => 6,
            Refusal::ExecWritable => 7,
            Refusal::Overflow => 8,
            Refusal::CachedWritable => 9,
            Refusal::BadValue(_) => 10,
        }
    }

    /// The refusal of a buffer check with code `code`, for codes that carry no data (what a platform
    /// reports back across C); `None` for the others.
    pub fn from_buffer_code(code: i32) -> Option<Refusal> {
        [Refusal::ZeroLength, Refusal::NoRights, Refusal::PolledCached, Refusal::ExecWritable, Refusal::Overflow]
            .into_iter()
            .chain([Refusal::CachedWritable])
            .find(|r| r.code() == code)
    }
}

/// Checks a platform's declared caps against this runtime's ABI and the services it needs.
pub fn negotiate(caps: &Caps, needed: Services) -> Result<(), Refusal> {
    if caps.abi_major != PLATFORM_ABI_MAJOR {
        return Err(Refusal::AbiMajor { platform: caps.abi_major, runtime: PLATFORM_ABI_MAJOR });
    }
    if caps.abi_minor < PLATFORM_ABI_MINOR {
        return Err(Refusal::AbiMinor { platform: caps.abi_minor, runtime: PLATFORM_ABI_MINOR });
    }
    let missing = needed - caps.services;
    if !missing.is_empty() {
        return Err(Refusal::MissingService(missing));
    }
    Ok(())
}

/// What a caller asks of a new buffer (`OmegaGpuBufferDesc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferDesc {
    /// Bytes requested (already rounded by the caller to the platform page).
    pub bytes: u64,
    /// Rights on both views.
    pub rights: Rights,
    /// GPU cache policy.
    pub cache: CachePolicy,
    /// What the buffer is for.
    pub kind: BufferKind,
}

/// The buffer checks of the contract, applied before any platform sees a descriptor.
pub fn check_buffer(desc: &BufferDesc) -> Result<(), Refusal> {
    if desc.bytes == 0 {
        return Err(Refusal::ZeroLength);
    }
    if desc.bytes > (1u64 << 48) {
        return Err(Refusal::Overflow);
    }
    if desc.rights.is_empty() {
        return Err(Refusal::NoRights);
    }
    if desc.rights.contains(Rights::HOST_POLLED) && desc.cache != CachePolicy::Uncached {
        return Err(Refusal::PolledCached);
    }
    if desc.rights.contains(Rights::GPU_EXEC | Rights::GPU_WRITE) {
        return Err(Refusal::ExecWritable);
    }
    if desc.cache == CachePolicy::Cached && desc.rights.intersects(Rights::GPU_WRITE | Rights::HOST_POLLED) {
        return Err(Refusal::CachedWritable);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(services: Services) -> Caps {
        Caps {
            abi_major: PLATFORM_ABI_MAJOR,
            abi_minor: PLATFORM_ABI_MINOR,
            services,
            page_bytes: 4096,
            code_prefetch_tail: MIN_CODE_PREFETCH_TAIL,
            param_base: 0x210,
            max_param_bytes: 4096,
            launch: crate::queue::LaunchLimits::SM_90,
        }
    }

    #[test]
    fn negotiation_refuses_a_missing_service_and_a_foreign_abi() {
        assert_eq!(negotiate(&caps(Services::all()), Services::SESSION), Ok(()));
        let without_poll = Services::all() - Services::POLL;
        assert_eq!(negotiate(&caps(without_poll), Services::SESSION), Err(Refusal::MissingService(Services::POLL)));
        let mut old = caps(Services::all());
        old.abi_minor = 1;
        assert_eq!(negotiate(&old, Services::SESSION).unwrap_err().name(), "OMEGA_GPU_PLAT_ABI_MINOR");
        old.abi_major = 2;
        assert_eq!(negotiate(&old, Services::SESSION).unwrap_err().name(), "OMEGA_GPU_PLAT_ABI_MAJOR");
    }

    #[test]
    fn a_missing_service_is_named_as_c_spells_it() {
        let r = Refusal::MissingService(Services::POLL | Services::SYNC);
        assert_eq!(r.to_string(), "OMEGA_GPU_PLAT_MISSING_SERVICE: OMEGA_GPU_SVC_POLL | OMEGA_GPU_SVC_SYNC");
        assert_eq!(service_names(Services::from_bits_retain(1 << 9)), "0x200");
        for code in 4..=9 {
            assert_eq!(Refusal::from_buffer_code(code).map(|r| r.code()), Some(code));
        }
        assert_eq!(Refusal::from_buffer_code(3), None);
    }

    #[test]
    fn buffer_checks_name_each_refusal() {
        let ok = BufferDesc {
            bytes: 4096,
            rights: Rights::CPU_READ | Rights::GPU_READ,
            cache: CachePolicy::Uncached,
            kind: BufferKind::Data,
        };
        assert_eq!(check_buffer(&ok), Ok(()));
        assert_eq!(check_buffer(&BufferDesc { bytes: 0, ..ok }), Err(Refusal::ZeroLength));
        assert_eq!(check_buffer(&BufferDesc { rights: Rights::empty(), ..ok }), Err(Refusal::NoRights));
        let polled = BufferDesc { rights: Rights::HOST_POLLED | Rights::GPU_WRITE, cache: CachePolicy::Cached, ..ok };
        assert_eq!(check_buffer(&polled), Err(Refusal::PolledCached));
        let exec = BufferDesc { rights: Rights::GPU_EXEC | Rights::GPU_WRITE, ..ok };
        assert_eq!(check_buffer(&exec), Err(Refusal::ExecWritable));
        let cached_w = BufferDesc { rights: Rights::GPU_WRITE, cache: CachePolicy::Cached, ..ok };
        assert_eq!(check_buffer(&cached_w), Err(Refusal::CachedWritable));
    }
}
