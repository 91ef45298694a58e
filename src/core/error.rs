//! Errors of the session layer. Every failure names its stage: the stage is the first words of the text
//! (the contract's `omega_gpu_session_last_error`), and [`Error::stage`] returns it alone.

use omega_hal::Handle;
/// The HAL's failures an [`Error`] carries, named here so that the shells need no door to the HAL.
pub use omega_hal::{ChannelFault, HalError, HandleError, Refusal};

/// A session-layer failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The platform could not be chosen or installed.
    #[error("platform: {0}")]
    Platform(String),
    /// The platform lacks something the session needs (refused, never emulated).
    #[error("platform: {0}")]
    Refused(#[from] Refusal),
    /// The lock was used against its discipline.
    #[error("lock: {0}")]
    Lock(&'static str),
    /// An unlock while the library holds the lock across code it does not control (named).
    #[error("lock: unlock refused: the lock is pinned by {0} on this thread, which releases it when it ends")]
    LockPinned(&'static str),
    /// A call an on-close hook may not make (a hook may only release buffers and read state).
    #[error("on close: `{0}` refused inside an on-close hook (a hook may only release buffers and read state)")]
    CloseHook(&'static str),
    /// A release of a buffer the library owns and releases itself.
    #[error("{stage}: the buffer is {owner}; nothing was released")]
    NotCallers {
        /// The call.
        stage: &'static str,
        /// Whose it is.
        owner: &'static str,
    },
    /// The device did not open; carries the driver's own text.
    #[error("open: {0}")]
    Open(HalError),
    /// The call needs an open device.
    #[error("{0}: device not open")]
    NotOpen(&'static str),
    /// An uncertain completion latched the process; nothing that could touch the device may run.
    #[error("{0}: refused, the process is latched after an uncertain completion")]
    Latched(&'static str),
    /// A device allocation failed.
    #[error("alloc: {0}")]
    Alloc(HalError),
    /// A handle was refused (stale, zero or foreign).
    #[error("{stage}: {source}")]
    Handle {
        /// The call.
        stage: &'static str,
        /// Why.
        source: HandleError,
    },
    /// A live handle given with another buffer's address: the `GpuMem` was changed or assembled by hand.
    /// Nothing is released.
    #[error(
        "{stage}: handle (index {}, generation {}) is live but names the buffer at {live_va:#x}, not {va:#x}",
        .handle.index,
        .handle.generation
    )]
    ForeignAddress {
        /// The call.
        stage: &'static str,
        /// The handle given, which is live.
        handle: Handle,
        /// The address given with it.
        va: u64,
        /// The address of the buffer the handle names.
        live_va: u64,
    },
    /// A visibility sync failed.
    #[error("sync: {0}")]
    Sync(HalError),
    /// Moving bytes into or out of a buffer (`write`, `read`) failed on the platform.
    #[error("{stage}: {source}")]
    Copy {
        /// The call: `write` or `read`.
        stage: &'static str,
        /// What the platform said.
        source: HalError,
    },
    /// The platform could not say how much device memory is free.
    #[error("mem info: {0}")]
    MemInfo(HalError),
    /// A launch descriptor failed the contract's checks; nothing ran.
    #[error("launch arguments: {0}")]
    LaunchArguments(String),
    /// The submission failed before the device saw it.
    #[error("launch: submit failed: {0}")]
    Submit(HalError),
    /// The launch was cancelled before it was submitted; nothing ran.
    #[error("launch: cancelled before submit")]
    CancelledBeforeSubmit,
    /// The launch was cancelled after submit: completion is uncertain and the process latched.
    #[error("launch: cancelled after submit; completion uncertain, process latched")]
    CancelledAfterSubmit,
    /// A completion marker did not arrive in time: the process latched.
    #[error("launch: completion timeout: marker {marker} not released within {timeout_ms} ms; process latched")]
    Timeout {
        /// Which marker (0 kernel done, 1 engine idle).
        marker: u8,
        /// The limit per marker.
        timeout_ms: u32,
    },
    /// The platform refused a completion poll: the process latched.
    #[error("launch: completion poll refused ({0}); process latched")]
    PollRefused(String),
    /// Code panicked after the submit (the platform's submit or poll, a simulated kernel, the wait): the
    /// device may hold the work, so the completion is uncertain and the process latched.
    #[error("launch: panic after submit ({0}); completion uncertain, process latched")]
    PanicAfterSubmit(String),
    /// The channel reported an error (the kernel faulted); the channel is dead until close and reopen.
    #[error("launch: kernel fault: {0}")]
    Fault(ChannelFault),
    /// A scratch request past an active reservation.
    #[error("scratch: request of {requested} bytes past the reservation of {reserved} bytes")]
    ScratchReserved {
        /// Bytes asked for.
        requested: usize,
        /// Bytes reserved.
        reserved: usize,
    },
    /// A kernel could not be loaded.
    #[error("load: {0}")]
    Load(String),
    /// A setting out of range.
    #[error("{stage}: {detail}")]
    Setting {
        /// The call.
        stage: &'static str,
        /// What was wrong.
        detail: String,
    },
}

impl Error {
    /// The stage alone ("launch arguments", "open", "alloc", ...).
    pub fn stage(&self) -> &'static str {
        match self {
            Error::Platform(_) | Error::Refused(_) => "platform",
            Error::Lock(_) | Error::LockPinned(_) => "lock",
            Error::CloseHook(_) => "on close",
            Error::NotCallers { stage, .. } => stage,
            Error::Open(_) => "open",
            Error::NotOpen(s) | Error::Latched(s) => s,
            Error::Alloc(_) => "alloc",
            Error::Handle { stage, .. } | Error::ForeignAddress { stage, .. } => stage,
            Error::Sync(_) => "sync",
            Error::Copy { stage, .. } => stage,
            Error::MemInfo(_) => "mem info",
            Error::LaunchArguments(_) => "launch arguments",
            Error::Submit(_)
            | Error::CancelledBeforeSubmit
            | Error::CancelledAfterSubmit
            | Error::Timeout { .. }
            | Error::PollRefused(_)
            | Error::PanicAfterSubmit(_)
            | Error::Fault(_) => "launch",
            Error::ScratchReserved { .. } => "scratch",
            Error::Load(_) => "load",
            Error::Setting { stage, .. } => stage,
        }
    }

    /// True when this failure latched the process.
    pub fn latched_the_process(&self) -> bool {
        matches!(
            self,
            Error::CancelledAfterSubmit | Error::Timeout { .. } | Error::PollRefused(_) | Error::PanicAfterSubmit(_)
        )
    }
}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
