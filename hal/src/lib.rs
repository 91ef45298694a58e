//! # omega-hal: the platform contract
//!
//! The thin, unsafe layer between Omega's session and a device. Design choices:
//!
//! 1. **A table of services.** A [`Platform`] is a set of services — [`clock`], [`lock`], device-visible
//!    [`memory`], the submission [`queue`], completion [`poll`], [`host`] memory, CPU/GPU [`visibility`]
//!    sync and the [`device`] itself — one module per service. A platform may lack a service; the session
//!    negotiates against [`Caps`] and a missing service is refused, never emulated.
//! 2. **Contracts are `unsafe`.** Every method whose misuse could let the device touch freed memory, or the
//!    CPU read through a dead view, is an `unsafe fn` whose `# Safety` list names the state the caller
//!    must be in. This crate validates almost nothing: `omega` owns every check and all typestate.
//! 3. **Errors are only what the caller cannot anticipate** ([`HalError`]): the driver said no, the device
//!    is gone, memory ran out. Misuse is a broken `# Safety` promise, not an error value.
//! 4. **Backends, one set of file names.** [`sim`] (always compiled, deterministic, fault injection,
//!    runs host implementations of kernels) and `nvidia` (Linux, NVIDIA's open kernel driver, no CUDA
//!    library; the cargo feature `nvidia`, on by default), plus `ctable`, a platform whose services are a
//!    C program's function table (`omega_gpu_platform.h`). Each has `mod.rs memory.rs queue.rs poll.rs
//!    visibility.rs device.rs`.
//! 5. **GPU code belongs to no backend.** [`arch`] (the table of everything chip-specific) and [`cubin`]
//!    (the ELF loader for ptxas output) are pure: the session parses kernels with them on every platform
//!    and build, so the simulator checks the same parameter tables the GPU uses, and `omega` with the
//!    simulator alone builds wherever Rust does.
//! 6. **One `sync` facade** ([`sync`]): every lock and atomic comes from it, so `--cfg loom` model-checks
//!    them all.

#![warn(missing_docs)]

pub mod arch;
pub mod caps;
pub mod clock;
pub mod cubin;
pub mod device;
pub mod driver;
pub mod error;
pub mod handle;
pub mod host;
pub mod lock;
pub mod memory;
pub mod poll;
pub mod queue;
pub mod sync;
pub mod tma;
pub mod visibility;

pub mod sim;

#[cfg(not(loom))]
pub mod ctable;

#[cfg(all(target_os = "linux", feature = "nvidia"))]
pub mod nvidia;

pub use caps::{
    check_buffer, negotiate, service_names, BufferDesc, BufferKind, CachePolicy, Caps, CodeFormat, Refusal, Rights,
    Services, MIN_CODE_PREFETCH_TAIL, PLATFORM_ABI_MAJOR, PLATFORM_ABI_MINOR,
};
pub use clock::{Clock, TimerSlack, WaitPolicy};
pub use device::{Device, DeviceInfo, StopFailure, Stopped};
pub use driver::{DriverCall, DriverCounters, DriverStats};
pub use error::HalError;
pub use handle::{Handle, HandleError, HandleTable};
pub use host::HostMemory;
pub use lock::{ProcessLock, SESSION_LOCK_ID};
pub use memory::{Allocation, DeviceMemory, MemInfo};
pub use poll::{ChannelFault, CompletionPoll, MarkerSlot, PollRefused};
pub use queue::{
    ClusterScheduling, ConstBank, LaunchDesc, LaunchFeatures, LaunchLimits, LimitError, Order, QueueBuffer, Submission,
    SubmitQueue, QMD_MAX_REGISTERS,
};
pub use visibility::Visibility;

/// A platform: the service table behind one contract.
///
/// Each accessor returns `None` when the platform lacks that service; [`Caps::services`] says the same
/// thing up front, and the session refuses (never emulates) what is missing.
pub trait Platform: Send + Sync {
    /// The platform's name as every report prints it: `"sim"` or `"nvidia"`.
    fn name(&self) -> &'static str;
    /// What it implements.
    fn caps(&self) -> Caps;
    /// The clock.
    fn clock(&self) -> Option<&dyn Clock>;
    /// The process-wide locks.
    fn lock(&self) -> Option<&dyn ProcessLock>;
    /// Device-visible memory.
    fn memory(&self) -> Option<&dyn DeviceMemory>;
    /// The submission queue.
    fn queue(&self) -> Option<&dyn SubmitQueue>;
    /// Completion polling.
    fn poll(&self) -> Option<&dyn CompletionPoll>;
    /// CPU-only memory.
    fn host(&self) -> Option<&dyn HostMemory>;
    /// CPU/GPU visibility sync.
    fn visibility(&self) -> Option<&dyn Visibility>;
    /// Device open, close and query.
    fn device(&self) -> Option<&dyn Device>;
    /// What the GPU executes from a code buffer: the device's machine code unless the platform says
    /// otherwise (the simulator runs code images naming host kernels).
    fn code_format(&self) -> CodeFormat {
        CodeFormat::Machine
    }
    /// How a completion wait uses the CPU when the caller sets no spin window (the session's default
    /// wait): [`WaitPolicy::DEFAULT`] unless the platform has measured better figures for its device.
    fn wait_policy(&self) -> WaitPolicy {
        WaitPolicy::DEFAULT
    }
    /// What the open device chose where it had a choice, as `(what, choice and why)` lines for reports
    /// (`make doctor`, the GPU suite): which signal names a fault, say. Empty while closed, and on a
    /// platform with nothing to say.
    fn notes(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
    /// The counters of every call this platform makes into its driver, and their seal ([`driver`]);
    /// `None` for a platform that cannot count them (a C function table), which therefore cannot be
    /// sealed for serving either.
    fn driver(&self) -> Option<&DriverCounters> {
        None
    }
}
