//! Device open and close on the simulator.

use super::{Sim, SimFault};
use crate::device::{Device, DeviceInfo, StopFailure, Stopped};
use crate::error::HalError;
use crate::sync;

impl Sim {
    /// What the simulated device reports.
    pub fn info(&self) -> DeviceInfo {
        DeviceInfo {
            name: "Omega simulated GPU (sm_90 model)".into(),
            sm_count: 132,
            memory_bytes: self.config.memory_bytes,
            arch_major: 9,
            arch_minor: 0,
            driver_version: format!("omega-sim {}", env!("CARGO_PKG_VERSION")),
            pci: String::new(),
        }
    }
}

impl Device for Sim {
    unsafe fn open(&self) -> Result<DeviceInfo, HalError> {
        let mut st = sync::lock(&self.state);
        if let Some(SimFault::FailOpen(text)) = st.take_fault(|f| matches!(f, SimFault::FailOpen(_))) {
            return Err(HalError::Driver { call: "open", status: 0x26, detail: text });
        }
        st.open = true;
        st.stopped = false;
        st.pending = None;
        st.channel_fault = None;
        st.stats.opens += 1;
        drop(st);
        Ok(self.info())
    }

    unsafe fn close(&self) {
        let mut st = sync::lock(&self.state);
        st.open = false;
        st.stopped = false;
        st.pending = None;
        st.memory.release_all();
        st.stats.closes += 1;
    }

    unsafe fn stop(&self) -> Result<Stopped, StopFailure> {
        let mut st = sync::lock(&self.state);
        if st.take_fault(|f| *f == SimFault::StopRefused).is_some() {
            return Err(StopFailure { step: "sim stop", source: HalError::Injected("stop refused") });
        }
        let steps = vec!["sim stop (pending work dropped)"];
        st.stopped = true;
        // The injected liar keeps the work scheduled: its slices go on running at the next peeks and polls.
        // A later stop drops it (a retry that works).
        if st.take_fault(|f| *f == SimFault::StopLeavesWork).is_none() {
            st.pending = None;
        }
        let channel = match &st.channel_fault {
            Some(f) => format!("stopped after channel error Xid {} ({})", f.xid, f.name),
            None => "stopped".into(),
        };
        Ok(Stopped { steps, channel })
    }
}
