//! Test support: the one door through which tests — Rust tests, and C tests through
//! `omega_gpu_sim_inject` — reach the simulator behind a runtime, to inject its faults and register host
//! kernels, and the service table behind a runtime, to drive it below the session.
//!
//! Nothing else in the crate hands out the simulator or the service table: the typed API and the C layer
//! reach the device only through the core's own calls (docs/design.md, "Layers"). A program has no
//! reason to use this module; a test of the runtime's failure paths does.

pub use omega_hal::sim::{Sim, SimConfig, SimFault};
pub use omega_hal::Platform;

use crate::error::{Error, Result, Stage};
use crate::platform::Installed;
use crate::session::{runtime, Runtime};
use crate::sync::Arc;

/// The simulator behind the process's runtime, when its platform is the simulator.
pub fn simulator() -> Option<Arc<Sim>> {
    simulator_of(runtime())
}

/// The simulator behind `rt`, when its platform is the simulator (installing the environment's choice
/// first, as every call that needs a platform does).
pub fn simulator_of(rt: &Runtime) -> Option<Arc<Sim>> {
    rt.installed().ok().and_then(|i| i.sim)
}

/// The service table behind `rt` (installing the environment's choice first).
pub fn platform_of(rt: &Runtime) -> Result<Arc<dyn Platform>> {
    rt.installed().map(|i| i.platform)
}

/// The simulator behind an installed platform, if it is one.
pub fn simulator_in(installed: &Installed) -> Option<Arc<Sim>> {
    installed.sim.clone()
}

/// The service table of an installed platform.
pub fn platform_in(installed: &Installed) -> Arc<dyn Platform> {
    installed.platform.clone()
}

/// Arms `fault` on the simulator behind `rt`. Refused when no platform installs (stage `platform`) or the
/// installed one is not the simulator (stage `sim inject`).
pub fn inject(rt: &Runtime, fault: SimFault) -> Result<()> {
    let installed = rt.installed()?;
    match installed.sim {
        Some(sim) => {
            sim.inject(fault);
            Ok(())
        }
        None => Err(Error::Setting {
            stage: Stage::SimInject,
            detail: crate::error::SettingError::NotSimulator(installed.name()),
        }),
    }
}

impl Installed {
    /// `platform`, a test's wrapper that forwards to simulator `sim` (to report, or to change what it
    /// declares), with `sim` behind it for fault injection and host kernels.
    pub fn simulator_behind(platform: Arc<dyn Platform>, sim: Arc<Sim>) -> Self {
        Installed { platform, sim: Some(sim) }
    }
}
