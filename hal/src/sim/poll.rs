//! Completion polling on the simulator: runs the kernel slices and releases the markers whose virtual time
//! has come, then reads.

use super::{Sim, SimFault};
use crate::poll::{ChannelFault, CompletionPoll, MarkerSlot, PollRefused};
use crate::sync;
use crate::Clock;

impl CompletionPoll for Sim {
    unsafe fn poll(&self, m: &MarkerSlot) -> Result<u32, PollRefused> {
        let now = self.clock.now_ns();
        let mut st = sync::lock(&self.state);
        if st.take_fault(|f| *f == SimFault::RefusePoll).is_some() {
            return Err(PollRefused::Injected);
        }
        self.advance(&mut st, now);
        drop(st);
        // SAFETY: the caller promised `m` lies in a live HOST_POLLED allocation.
        Ok(unsafe { (m.cpu as *const u32).read_volatile() })
    }

    unsafe fn timestamp(&self, m: &MarkerSlot) -> u64 {
        // SAFETY: as for poll; the timestamp is the second half of the 16-byte marker.
        unsafe { (m.cpu.add(8) as *const u64).read_volatile() }
    }

    fn channel_fault(&self) -> Option<ChannelFault> {
        sync::lock(&self.state).channel_fault.clone()
    }
}
