//! The device service: open and close the device, and say what it is.

use crate::error::HalError;

/// What the device query reports.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct DeviceInfo {
    /// Marketing name ("NVIDIA H200", "Omega simulated GPU").
    pub name: String,
    /// Streaming multiprocessors.
    pub sm_count: u32,
    /// Device memory in bytes.
    pub memory_bytes: u64,
    /// Compute capability major (9 for Hopper).
    pub arch_major: u32,
    /// Compute capability minor.
    pub arch_minor: u32,
    /// Kernel driver version ("580.159.04"), or the simulator's version.
    pub driver_version: String,
    /// PCI location and ids ("0000:00:05.0 10de:2335"), empty where there is no bus.
    pub pci: String,
}

/// What [`Device::stop`] did: the platform's calls that stopped the work, the one whose success is the
/// platform's word that it stopped, what was refused on the way, and what the channel read afterwards.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct Stopped {
    /// The calls that reported success, in the order made ("NVA06F_CTRL_CMD_STOP_CHANNEL", "GPFIFO
    /// channel" for its RM_FREE, ...).
    pub steps: Vec<&'static str>,
    /// The step that proved the stop, as far as the platform can: the channel stop when every channel
    /// took it, else the free of the channel groups that followed its refusal (on the GPU RM's free
    /// preempts the group and, when the preempt fails, resets the engine context).
    pub proved_by: &'static str,
    /// Steps refused on the way that the stop went on without, in order, with what the platform said:
    /// the channel stop that timed out, a preempt before the free that did too.
    pub refused: Vec<StopFailure>,
    /// What the channel reported after the stop, for reports (the error notifier's entry on the GPU).
    pub channel: String,
}

/// Why [`Device::stop`] could not stop the work: the step that failed and what the platform said, and,
/// when it was the free that followed a refused channel stop, that refusal too. The work may still run;
/// nothing may be released.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StopFailure {
    /// The step ("NVA06F_CTRL_CMD_STOP_CHANNEL", "RM_FREE channel group", "stop").
    pub step: &'static str,
    /// What the platform said.
    pub source: HalError,
    /// The channel stop's refusal that sent the stop on to this step, if that is how it got here.
    pub after: Option<Box<StopFailure>>,
}

impl StopFailure {
    /// `step` failed with `source`, as the first cause.
    pub fn new(step: &'static str, source: HalError) -> StopFailure {
        StopFailure { step, source, after: None }
    }
}

impl std::fmt::Display for StopFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.step, self.source)?;
        match &self.after {
            Some(first) => write!(f, ", after the channel stop was refused ({first})"),
            None => Ok(()),
        }
    }
}

impl std::error::Error for StopFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// What the steps of a stop record as they go ([`run_stop`]).
#[derive(Debug, Default)]
pub(crate) struct StopLog {
    /// Calls that reported success, in order.
    pub(crate) steps: Vec<&'static str>,
    /// Calls refused that the stop went on without.
    pub(crate) refused: Vec<StopFailure>,
}

/// The steps of a stop as one platform makes them. [`run_stop`] orders them and decides what a refusal of
/// each means, once for every platform, so the simulator's injected refusals test the decisions the GPU
/// backend makes.
pub(crate) trait StopSteps {
    /// Stops every channel still there, the gentle way (on the GPU: disabled, preempted, notified). Returns
    /// the step that stopped them, or `None` when no channel was left to stop (an earlier attempt freed
    /// them). The first refusal ends it.
    fn stop_channels(&mut self, log: &mut StopLog) -> Result<Option<&'static str>, StopFailure>;

    /// After a refused channel stop, before the free: whatever makes the free's job smaller. Each
    /// refusal goes to `log.refused`; none ends the stop, because the free that follows is what must work.
    fn quiesce(&mut self, log: &mut StopLog);

    /// Frees every channel and its group, checking that each is gone. Returns the step that freed the
    /// last group; the first refusal ends it, and what was freed stays freed (a retry goes on from there).
    fn free_channels(&mut self, log: &mut StopLog) -> Result<&'static str, StopFailure>;

    /// What the channel reads now, for the report.
    fn channel(&self) -> String;
}

/// A stop, in the one order every platform follows: the channel stop; if it is refused (the H200 answered
/// NV_ERR_TIMEOUT for a channel spinning a kernel), the quiescing steps and then the free, which must
/// work and then proves the stop; if it worked, the free anyway, so nothing of the process's is left to
/// schedule. When the free fails after a refused stop, the failure names both.
pub(crate) fn run_stop(p: &mut impl StopSteps) -> Result<Stopped, StopFailure> {
    let mut log = StopLog::default();
    let (stopped_by, first) = match p.stop_channels(&mut log) {
        Ok(by) => (by, None),
        Err(e) => {
            log.refused.push(e.clone());
            p.quiesce(&mut log);
            (None, Some(Box::new(e)))
        }
    };
    let freed_by = p.free_channels(&mut log).map_err(|e| StopFailure { after: first, ..e })?;
    Ok(Stopped {
        steps: log.steps,
        proved_by: stopped_by.unwrap_or(freed_by),
        refused: log.refused,
        channel: p.channel(),
    })
}

/// Device open, close and query.
pub trait Device: Send + Sync {
    /// Opens the device: after success every other service may be used.
    ///
    /// # Safety
    /// - The caller holds the session lock and the device is not open.
    unsafe fn open(&self) -> Result<DeviceInfo, HalError>;

    /// Closes the device and releases everything the platform holds for it.
    ///
    /// # Safety
    /// - The caller holds the session lock, the device is open, no submitted work may still run (every
    ///   submission's markers were observed), and every allocation was freed: nothing may be closed after
    ///   an uncertain completion.
    unsafe fn close(&self);

    /// Stops every piece of work submitted since the device opened and tears down what ran it (on the GPU
    /// the channel and its group), so that no engine of the device runs this process's work any more —
    /// for a session recovering from an uncertain completion. Frees no memory: the session samples the
    /// memory the work could write ([`DeviceMemory::peek`](crate::memory::DeviceMemory::peek)) and only
    /// then closes. After it returns `Ok`, nothing may be submitted: `close` is the next call. Calling it
    /// again after an `Ok` repeats nothing and reports the same steps. The backends of this crate follow
    /// one order (`run_stop`: the channel stop, else a free that must work) and say which step proved the
    /// stop ([`Stopped::proved_by`]). A platform that cannot stop work refuses (the default), and the
    /// session stays latched.
    ///
    /// # Safety
    /// - The caller holds the session lock and the device is open.
    unsafe fn stop(&self) -> Result<Stopped, StopFailure> {
        Err(StopFailure::new("stop", HalError::Unsupported("this platform cannot stop submitted work".into())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Steps that refuse as told and record the order they were called in.
    #[derive(Default)]
    struct Script {
        stop: Option<HalError>,
        free: Option<HalError>,
        quiesce_refuses: bool,
        calls: Vec<&'static str>,
    }

    impl StopSteps for Script {
        fn stop_channels(&mut self, log: &mut StopLog) -> Result<Option<&'static str>, StopFailure> {
            self.calls.push("stop");
            match self.stop.take() {
                Some(e) => Err(StopFailure::new("stop", e)),
                None => {
                    log.steps.push("stop");
                    Ok(Some("stop"))
                }
            }
        }

        fn quiesce(&mut self, log: &mut StopLog) {
            self.calls.push("quiesce");
            match self.quiesce_refuses {
                true => log.refused.push(StopFailure::new("preempt", HalError::Injected("preempt timed out"))),
                false => log.steps.push("preempt"),
            }
        }

        fn free_channels(&mut self, log: &mut StopLog) -> Result<&'static str, StopFailure> {
            self.calls.push("free");
            match self.free.take() {
                Some(e) => Err(StopFailure::new("free", e)),
                None => {
                    log.steps.push("free");
                    Ok("free")
                }
            }
        }

        fn channel(&self) -> String {
            "clean".into()
        }
    }

    const TIMEOUT: HalError = HalError::Injected("stop timed out");

    #[test]
    fn a_stop_that_works_is_the_proof_and_the_free_follows_without_quiescing() {
        let mut s = Script::default();
        let r = run_stop(&mut s).unwrap();
        assert_eq!(s.calls, ["stop", "free"]);
        assert_eq!((r.steps, r.proved_by, r.refused), (vec!["stop", "free"], "stop", vec![]));
    }

    #[test]
    fn a_refused_stop_quiesces_then_the_free_proves_it_whatever_the_quiescing_said() {
        let mut s = Script { stop: Some(TIMEOUT), quiesce_refuses: true, ..Script::default() };
        let r = run_stop(&mut s).unwrap();
        assert_eq!(s.calls, ["stop", "quiesce", "free"]);
        assert_eq!((r.steps, r.proved_by), (vec!["free"], "free"));
        let refused: Vec<_> = r.refused.iter().map(|f| f.step).collect();
        assert_eq!(refused, ["stop", "preempt"], "both refusals reported, in order");
    }

    #[test]
    fn a_free_that_fails_names_the_refused_stop_before_it_and_only_then() {
        let mut s = Script { stop: Some(TIMEOUT), free: Some(HalError::Injected("free refused")), ..Script::default() };
        let f = run_stop(&mut s).unwrap_err();
        assert_eq!((f.step, f.after.as_ref().map(|a| a.step)), ("free", Some("stop")));
        assert_eq!(
            f.to_string(),
            "free: injected fault: free refused, after the channel stop was refused (stop: injected fault: stop timed out)"
        );
        assert_eq!(std::error::Error::source(&f).map(|e| e.to_string()), Some("injected fault: free refused".into()));

        let mut s = Script { free: Some(HalError::Injected("free refused")), ..Script::default() };
        let f = run_stop(&mut s).unwrap_err();
        assert_eq!((f.step, f.after), ("free", None));
    }
}
