//! Choosing the platform: `OMEGA_PLATFORM=sim|nvidia` forces one; unset, the NVIDIA backend is chosen when
//! this build has it (Linux, the `nvidia` feature) and the driver's control file exists, the simulator
//! otherwise. Forcing `nvidia` where there is no device is an error naming the missing file (or, in a
//! build without the backend, saying so) — never a silent fallback to the simulator.

use omega_hal::sim::Sim;
use omega_hal::Platform;

use crate::error::{Error, Result};
use crate::sync::Arc;

/// Whether this build has the nvidia backend (Linux, with the `nvidia` feature).
const NVIDIA_BUILT: bool = cfg!(all(target_os = "linux", feature = "nvidia"));

/// Which backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlatformKind {
    /// The simulated device in host memory.
    Sim,
    /// NVIDIA's open kernel driver.
    Nvidia,
}

impl PlatformKind {
    /// The name every report prints.
    pub fn name(self) -> &'static str {
        match self {
            PlatformKind::Sim => "sim",
            PlatformKind::Nvidia => "nvidia",
        }
    }

    /// Parses `sim` or `nvidia`.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "sim" => Ok(PlatformKind::Sim),
            "nvidia" => Ok(PlatformKind::Nvidia),
            other => Err(Error::Platform(format!("unknown platform `{other}` (expected `sim` or `nvidia`)"))),
        }
    }

    /// The platform the environment asks for: `OMEGA_PLATFORM`, else `nvidia` when this build has the
    /// nvidia backend and `/dev/nvidiactl` exists, else `sim`. (A build without the backend still refuses
    /// `OMEGA_PLATFORM=nvidia` by name when the platform is installed.)
    pub fn from_env() -> Result<Self> {
        match std::env::var("OMEGA_PLATFORM") {
            Ok(v) if !v.is_empty() => Self::parse(&v),
            _ if NVIDIA_BUILT && std::path::Path::new("/dev/nvidiactl").exists() => Ok(PlatformKind::Nvidia),
            _ => Ok(PlatformKind::Sim),
        }
    }
}

/// An installed platform: the service table, and the simulator behind it when it is one.
#[derive(Clone)]
pub struct Installed {
    /// The service table.
    pub platform: Arc<dyn Platform>,
    /// The simulator, for fault injection and kernel registration.
    pub sim: Option<Arc<Sim>>,
}

impl Installed {
    /// A fresh simulator with the repository's kernels registered.
    pub fn sim() -> Self {
        let sim = Sim::new();
        crate::kernels::register_host_kernels(&sim);
        Installed { platform: sim.clone(), sim: Some(sim) }
    }

    /// Builds the platform of `kind`.
    pub fn new(kind: PlatformKind) -> Result<Self> {
        match kind {
            PlatformKind::Sim => Ok(Self::sim()),
            PlatformKind::Nvidia => nvidia(),
        }
    }

    /// The platform's name.
    pub fn name(&self) -> &'static str {
        self.platform.name()
    }
}

#[cfg(all(target_os = "linux", feature = "nvidia"))]
fn nvidia() -> Result<Installed> {
    let nv = omega_hal::nvidia::Nvidia::probe().map_err(|e| Error::Platform(format!("nvidia: {e}")))?;
    Ok(Installed { platform: nv, sim: None })
}

#[cfg(all(target_os = "linux", not(feature = "nvidia")))]
fn nvidia() -> Result<Installed> {
    Err(Error::Platform(
        "nvidia: this build has no nvidia backend (omega was built without its `nvidia` feature)".into(),
    ))
}

#[cfg(not(target_os = "linux"))]
fn nvidia() -> Result<Installed> {
    Err(Error::Platform("nvidia: the open-driver backend exists only on Linux".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_environment_picks_only_a_backend_this_build_has() {
        // With OMEGA_PLATFORM unset, a build without the backend must not pick it, whatever /dev holds;
        // with it, the control file decides. (The variable is only read, never set, by the tests.)
        if std::env::var_os("OMEGA_PLATFORM").is_some() {
            return;
        }
        let kind = PlatformKind::from_env().unwrap();
        let nvidia = NVIDIA_BUILT && std::path::Path::new("/dev/nvidiactl").exists();
        assert_eq!(kind, if nvidia { PlatformKind::Nvidia } else { PlatformKind::Sim });
    }

    #[cfg(not(all(target_os = "linux", feature = "nvidia")))]
    #[test]
    fn a_build_without_the_nvidia_backend_refuses_it_by_name() {
        match Installed::new(PlatformKind::Nvidia) {
            Err(Error::Platform(why)) => assert!(why.starts_with("nvidia: "), "{why}"),
            Err(other) => panic!("wrong error: {other}"),
            Ok(p) => panic!("installed {} instead of refusing", p.name()),
        }
        assert_eq!(Installed::new(PlatformKind::Sim).map(|p| p.name()).ok(), Some("sim"));
    }
}
