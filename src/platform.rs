//! Choosing the platform: `OMEGA_PLATFORM=sim|nvidia` forces one; unset, the NVIDIA backend is chosen when
//! the driver's control file exists and the simulator otherwise. Forcing `nvidia` where there is no device
//! is an error naming the missing file — never a silent fallback to the simulator.

use omega_hal::sim::Sim;
use omega_hal::Platform;

use crate::error::{Error, Result};
use crate::sync::Arc;

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

    /// The platform the environment asks for: `OMEGA_PLATFORM`, else `nvidia` when `/dev/nvidiactl`
    /// exists, else `sim`.
    pub fn from_env() -> Result<Self> {
        match std::env::var("OMEGA_PLATFORM") {
            Ok(v) if !v.is_empty() => Self::parse(&v),
            _ if std::path::Path::new("/dev/nvidiactl").exists() => Ok(PlatformKind::Nvidia),
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

/// The NVIDIA platform, or what this machine lacks for it. Without the device files the reason is the
/// kernel module when none is loaded (nothing under `/proc/driver/nvidia`), else the missing files.
#[cfg(target_os = "linux")]
fn nvidia() -> Result<Installed> {
    match omega_hal::nvidia::Nvidia::probe() {
        Ok(nv) => Ok(Installed { platform: nv, sim: None }),
        Err(omega_hal::HalError::NoDevice(missing_files)) => {
            Err(match crate::doctor::module_version(std::path::Path::new("/")) {
                Err(no_module) => Error::Platform(format!("nvidia: {no_module}")),
                // The backend's text already names the platform and the missing files.
                Ok(_) => Error::Platform(missing_files),
            })
        }
        Err(other) => Err(Error::Platform(format!("nvidia: {other}"))),
    }
}

#[cfg(not(target_os = "linux"))]
fn nvidia() -> Result<Installed> {
    Err(Error::Platform("nvidia: the open-driver backend exists only on Linux".into()))
}
