//! Device open and close on the simulator.

use super::{Sim, SimFault, State};
use crate::device::{run_stop, Device, DeviceInfo, StopFailure, StopLog, StopSteps, Stopped};
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
        // No more submissions from here, whatever happens below, as on the GPU.
        st.stopped = true;
        let stopped = run_stop(&mut SimStop(&mut st))?;
        // The injected liar keeps the work scheduled: its slices go on running at the next peeks and polls.
        // A later stop drops it (a retry that works).
        if st.take_fault(|f| *f == SimFault::StopLeavesWork).is_none() {
            st.pending = None;
        }
        Ok(stopped)
    }
}

/// The simulator's steps of a stop ([`run_stop`]): a channel stop and a free of the channel group, each
/// refused when a fault is injected for it. They drop nothing themselves: the caller drops the pending
/// work once the whole stop has worked, so a refused stop leaves it running, as on the GPU.
struct SimStop<'a>(&'a mut State);

impl StopSteps for SimStop<'_> {
    fn stop_channels(&mut self, log: &mut StopLog) -> Result<Option<&'static str>, StopFailure> {
        if self.0.take_fault(|f| *f == SimFault::StopTimesOut).is_some() {
            let source =
                HalError::Injected("the channel stop timed out (the H200's STOP_CHANNEL on a spinning kernel)");
            return Err(StopFailure::new(SIM_STOP, source));
        }
        log.steps.push(SIM_STOP);
        Ok(Some(SIM_STOP))
    }

    /// The simulator has no scheduler to disable and no preempt apart from the free: nothing to do.
    fn quiesce(&mut self, _log: &mut StopLog) {}

    fn free_channels(&mut self, log: &mut StopLog) -> Result<&'static str, StopFailure> {
        if self.0.take_fault(|f| *f == SimFault::FreeRefused).is_some() {
            return Err(StopFailure::new(SIM_FREE, HalError::Injected("the free of the channel group was refused")));
        }
        log.steps.push(SIM_FREE);
        Ok(SIM_FREE)
    }

    fn channel(&self) -> String {
        match &self.0.channel_fault {
            Some(f) => format!("stopped after channel error Xid {} ({})", f.xid, f.name),
            None => "stopped".into(),
        }
    }
}

/// The simulator's channel stop.
const SIM_STOP: &str = "sim stop channel";
/// The simulator's free of the channel group.
const SIM_FREE: &str = "sim free channel group";
