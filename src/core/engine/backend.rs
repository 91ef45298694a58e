//! What a backend does for the engine: one method per step, each reporting only what that step can meet.
//! The engine alone turns a step's outcome into the run's one failure name, so every backend maps the
//! same way.

use super::types::{BackendDiag, Timeouts, Wait};

/// Why the backend's device is not usable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unready {
    /// Not usable now (lock not held, open failed, channel dead): DEVICE_UNAVAILABLE.
    Unavailable(String),
    /// Latched after an uncertain completion: the device may still be running (UNCERTAIN_COMPLETION_BLOCKED).
    Latched(String),
}

/// How the launch step failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LaunchFailure {
    /// Refused before the device saw anything: certain, nothing ran.
    Refused(String),
    /// A marker did not arrive within its limit: uncertain.
    Timeout(Wait),
    /// The poll of a marker was refused: uncertain.
    PollRefused(Wait, String),
    /// Cancelled while waiting for a marker: uncertain.
    Cancelled(Wait),
    /// The channel reported an error while waiting for a marker: certain (the work stopped).
    Fault {
        /// The wait it ended.
        wait: Wait,
        /// The channel's error code.
        xid: u32,
        /// Its text.
        detail: String,
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
    fn alloc(&mut self, n: usize) -> Result<(), String>;
    /// Writes the inputs to the device and poisons the device output.
    fn upload(&mut self, a: &[f32], b: &[f32]) -> Result<(), String>;
    /// Places the kernel, submits `out = a + b` over `n` elements and waits for both markers.
    fn launch(&mut self, n: usize, timeouts: &Timeouts) -> Result<CompletedLaunch, LaunchFailure>;
    /// Copies the device output into `out`.
    fn readback(&mut self, out: &mut [f32]) -> Result<(), String>;
    /// Releases what `alloc` and `launch` took (parks it if the device is latched).
    fn release(&mut self);
    /// What the backend saw of the last run.
    fn diag(&self) -> BackendDiag;
}
