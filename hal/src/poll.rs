//! The completion-poll service: reads the marker words the device releases. Polling a word is never
//! claimed as interrupt support; a refused poll is an uncertain completion.

/// A 16-byte marker in a HOST_POLLED (GPU-uncached) buffer: payload word at +0, timestamp at +8.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MarkerSlot {
    /// GPU address the device releases to.
    pub va: u64,
    /// CPU address the host polls.
    pub cpu: *mut u8,
}

// SAFETY: a slot is two addresses; the memory behind them is only read or written under the session lock.
unsafe impl Send for MarkerSlot {}
// SAFETY: as above.
unsafe impl Sync for MarkerSlot {}

/// A poll the platform would not perform, and why (the text is the cause; the session says what was
/// refused: `launch: completion poll refused (<cause>); process latched`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PollRefused {
    /// The simulator's injected refusal (`SimFault::RefusePoll`).
    #[error("sim: injected poll refusal")]
    Injected,
    /// A marker with no CPU view, which the nvidia backend cannot read.
    #[error("nvidia: marker at {va:#x} has no CPU view")]
    NoCpuView {
        /// The marker's GPU address.
        va: u64,
    },
    /// A C platform table's refusal, in the table's own words.
    #[error("{0}")]
    Table(String),
}

/// An error the channel reported (the driver's error notifier), with its Xid.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("channel error Xid {xid} ({name}): {detail}")]
pub struct ChannelFault {
    /// The robust-channel error code (13 GR exception, 31 MMU fault, ...).
    pub xid: u32,
    /// Its fixed name.
    pub name: &'static str,
    /// What the platform knows beyond the code.
    pub detail: String,
}

/// Names the robust-channel codes a runtime meets.
pub fn xid_name(xid: u32) -> &'static str {
    match xid {
        13 => "GR exception",
        31 => "MMU fault",
        32 => "PBDMA error",
        43 => "channel reset",
        44 => "GR fault during context switch",
        45 => "preemptive removal",
        69 => "GR class error",
        _ => "channel error",
    }
}

/// Completion polling.
pub trait CompletionPoll: Send + Sync {
    /// Reads the payload word of `m`.
    ///
    /// # Safety
    /// - `m` lies in a live HOST_POLLED allocation of this platform.
    unsafe fn poll(&self, m: &MarkerSlot) -> Result<u32, PollRefused>;

    /// Reads the timestamp the device released beside the payload of `m`, in device nanoseconds.
    ///
    /// # Safety
    /// Same as [`CompletionPoll::poll`].
    unsafe fn timestamp(&self, m: &MarkerSlot) -> u64;

    /// The channel's error, if it reported one (read on every slow wait, so a fault ends the wait early).
    fn channel_fault(&self) -> Option<ChannelFault>;
}
