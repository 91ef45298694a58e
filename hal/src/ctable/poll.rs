//! Completion polling through a C table (the POLL service).

use super::{f, read_c_text, OmegaGpuChannelFault, OmegaGpuMarker, OmegaGpuPlatformError, TablePlatform};
use crate::poll::{xid_name, ChannelFault, CompletionPoll, MarkerSlot, PollRefused};

impl OmegaGpuMarker {
    /// `m` as C lays it out.
    pub fn from_hal(m: &MarkerSlot) -> Self {
        OmegaGpuMarker { va: m.va, cpu: m.cpu.cast() }
    }

    /// The marker in the HAL's terms.
    pub fn to_hal(&self) -> MarkerSlot {
        MarkerSlot { va: self.va, cpu: self.cpu.cast() }
    }
}

impl CompletionPoll for TablePlatform {
    unsafe fn poll(&self, m: &MarkerSlot) -> Result<u32, PollRefused> {
        let c = OmegaGpuMarker::from_hal(m);
        let mut word = 0u32;
        let mut err = OmegaGpuPlatformError::NONE;
        // SAFETY: `m` lies in a live HOST_POLLED buffer of this platform (CompletionPoll::poll's contract),
        // OmegaGpuPollService's `poll` rule; `c`, `word` and `err` are live locals for the call.
        match unsafe { f(self.table.poll.poll)(self.ctx(), &c, &mut word, &mut err) } {
            0 => Ok(word),
            _ => Err(PollRefused::Table(read_c_text(&err.text))),
        }
    }

    unsafe fn timestamp(&self, m: &MarkerSlot) -> u64 {
        let c = OmegaGpuMarker::from_hal(m);
        // SAFETY: as for poll, with `timestamp`.
        unsafe { f(self.table.poll.timestamp)(self.ctx(), &c) }
    }

    fn channel_fault(&self) -> Option<ChannelFault> {
        let mut out = OmegaGpuChannelFault { xid: 0, reserved: 0, text: [0; 256] };
        // SAFETY: OmegaGpuPollService's `channel_fault` has no precondition; `out` is a live local.
        let faulted = unsafe { f(self.table.poll.channel_fault)(self.ctx(), &mut out) } != 0;
        faulted.then(|| ChannelFault { xid: out.xid, name: xid_name(out.xid), detail: read_c_text(&out.text) })
    }
}
