//! What a backend does for the engine: one method per step, each reporting only what that step can meet.
//! The engine alone turns a step's outcome into the run's one failure name, so every backend maps the
//! same way.

use super::types::{BackendDiag, Timeouts, Wait};
use crate::error::{ChannelFault, Error};

/// Why a backend's step could not go on, in the backend's terms; the run's detail text is its Display.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StepCause {
    /// The session's own failure (the session backend), whole.
    #[error("{0}")]
    Session(Box<Error>),
    /// A job of `n` f32 whose bytes overflow the address space.
    #[error("{n} f32 overflow the address space")]
    Overflow {
        /// The job's length.
        n: usize,
    },
    /// The calling thread does not hold the session lock.
    #[error("the calling thread does not hold the session lock (take it first)")]
    LockNotHeld,
    /// The session is latched: `cause` latched it.
    #[error("the session is latched: {cause}")]
    SessionLatched {
        /// The failure that latched the session.
        cause: Box<Error>,
    },
    /// The channel faulted in an earlier run and stays dead until close and reopen.
    #[error("the channel is dead until close and reopen ({0})")]
    ChannelDead(ChannelFault),
    /// The channel reported an error during this launch.
    #[error("{0}")]
    Fault(ChannelFault),
    /// A custom backend table without the step's function.
    #[error("the backend table has no `{0}` function")]
    TableMissing(&'static str),
    /// A custom backend's step returned a failure code.
    #[error("custom backend: {step} returned {rc}")]
    TableStep {
        /// The step.
        step: &'static str,
        /// Its return code.
        rc: i32,
    },
    /// A custom backend's prepare reported a latched device.
    #[error("custom backend: the device is latched")]
    TableLatched,
    /// A custom backend refused the launch.
    #[error("custom backend: launch refused")]
    TableRefused,
    /// A custom backend's poll was refused.
    #[error("custom backend: poll refused")]
    TablePollRefused,
    /// A custom backend reported a channel error.
    #[error("custom backend: channel error Xid {0}")]
    TableFault(u32),
    /// The fake backend's injected faults, one per step it can fail.
    #[error("fake: device unavailable (injected)")]
    FakeUnavailable,
    /// Injected: latched.
    #[error("fake: device latched (injected)")]
    FakeLatched,
    /// Injected: out of memory at alloc.
    #[error("fake: out of device memory (injected)")]
    FakeOutOfMemory,
    /// Injected: the upload's sync refused.
    #[error("fake: sync to device refused (injected)")]
    FakeSyncToDevice,
    /// Injected: the launch refused before submit.
    #[error("fake: launch refused before submit (injected)")]
    FakeRefused,
    /// Injected: the poll refused.
    #[error("fake: poll refused (injected)")]
    FakePollRefused,
    /// Injected: a channel error.
    #[error("fake: channel error Xid {0} (injected)")]
    FakeFault(u32),
    /// Injected: the readback's sync refused.
    #[error("fake: sync to CPU refused (injected)")]
    FakeSyncToCpu,
}

impl From<Error> for StepCause {
    fn from(e: Error) -> StepCause {
        StepCause::Session(Box::new(e))
    }
}

/// Why the backend's device is not usable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unready {
    /// Not usable now (lock not held, open failed, channel dead): DEVICE_UNAVAILABLE.
    Unavailable(StepCause),
    /// Latched after an uncertain completion: the device may still be running (UNCERTAIN_COMPLETION_BLOCKED).
    Latched(StepCause),
}

/// How the launch step failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LaunchFailure {
    /// Refused before the device saw anything: certain, nothing ran.
    Refused(StepCause),
    /// A marker did not arrive within its limit: uncertain.
    Timeout(Wait),
    /// The poll of a marker was refused: uncertain.
    PollRefused(Wait, StepCause),
    /// Cancelled while waiting for a marker: uncertain.
    Cancelled(Wait),
    /// The channel reported an error while waiting for a marker: certain (the work stopped).
    Fault {
        /// The wait it ended.
        wait: Wait,
        /// The channel's error code.
        xid: u32,
        /// The channel's report.
        detail: StepCause,
    },
}

/// A completed launch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompletedLaunch {
    /// Submit to the ENGINE_IDLE marker, backend-clock ns.
    pub kernel_ns: u64,
    /// The first marker word observed.
    pub marker: u32,
}

/// A backend: where the engine's steps run. `Send`, because the process-wide engine may be used from any
/// thread (one run at a time).
///
/// The engine calls, in order: `prepare`, `alloc`, `upload`, `launch`, `readback`, and `release` once after
/// any `alloc`, whatever happened next (a failed alloc may have taken part of what it asked for). After an uncertain launch failure, `release` must not
/// return the buffers to anything that could reuse them (the session backend's runtime parks them).
pub trait Backend: Send {
    /// [`super::BACKEND_SESSION`], [`super::BACKEND_FAKE`] or [`super::BACKEND_CUSTOM`].
    fn kind(&self) -> u32;
    /// The backend's clock, ns: the engine's clock unless [`super::set_clock`] replaced it.
    fn now_ns(&self) -> u64;
    /// Makes the device usable.
    fn prepare(&mut self) -> Result<(), Unready>;
    /// Allocates device buffers for two inputs and an output of `n` f32.
    fn alloc(&mut self, n: usize) -> Result<(), StepCause>;
    /// Writes the inputs to the device and poisons the device output.
    fn upload(&mut self, a: &[f32], b: &[f32]) -> Result<(), StepCause>;
    /// Places the kernel, submits `out = a + b` over `n` elements and waits for both markers.
    fn launch(&mut self, n: usize, timeouts: &Timeouts) -> Result<CompletedLaunch, LaunchFailure>;
    /// Copies the device output into `out`.
    fn readback(&mut self, out: &mut [f32]) -> Result<(), StepCause>;
    /// Releases what `alloc` and `launch` took (parks it if the device is latched).
    fn release(&mut self);
    /// What the backend saw of the last run.
    fn diag(&self) -> BackendDiag;
}
