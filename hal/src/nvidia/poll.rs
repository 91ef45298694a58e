//! Completion polling: a volatile read of a marker word in GPU-uncached system memory, the timestamp the
//! GPU released beside it, and the channel's faults: the error notifier, and UVM's fatal-fault events,
//! which name an MMU fault before the driver's teardown writes the notifier (`fault.rs`).

use super::channel::notifier_detail;
use super::fault::XID_MMU_FAULT;
use super::Nvidia;
use crate::poll::{xid_name, ChannelFault, CompletionPoll, MarkerSlot, PollRefused};
use crate::sync;

impl CompletionPoll for Nvidia {
    unsafe fn poll(&self, m: &MarkerSlot) -> Result<u32, PollRefused> {
        if m.cpu.is_null() {
            return Err(PollRefused::NoCpuView { va: m.va });
        }
        // SAFETY: the caller promised `m` lies in a live HOST_POLLED allocation, which this backend maps
        // CPU-cached over GPU-uncached system memory: the GPU's release is visible to this read.
        Ok(unsafe { (m.cpu as *const u32).read_volatile() })
    }

    unsafe fn timestamp(&self, m: &MarkerSlot) -> u64 {
        if m.cpu.is_null() {
            return 0;
        }
        // SAFETY: as for poll; the timestamp is the second half of the 16-byte marker.
        unsafe { (m.cpu.add(8) as *const u64).read_volatile() }
    }

    fn channel_fault(&self) -> Option<ChannelFault> {
        let mut st = sync::lock(&self.state);
        let open = st.as_mut()?;
        // The notifier first: once the driver has written it, its Xid is the authority.
        if let Some(n) = open.channels.compute.error() {
            return Some(ChannelFault { xid: n.info32, name: xid_name(n.info32), detail: notifier_detail(&n) });
        }
        let f = open.faults.fatal_fault()?;
        // What the driver's teardown of this fault writes to the notifier: ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT.
        Some(ChannelFault { xid: XID_MMU_FAULT, name: xid_name(XID_MMU_FAULT), detail: f.detail() })
    }
}
