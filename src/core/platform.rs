//! Choosing the platform: `OMEGA_PLATFORM=sim|nvidia` forces one; unset, the NVIDIA backend is chosen when
//! this build has it (Linux, the `nvidia` feature) and the driver's control file exists, the simulator
//! otherwise. Forcing `nvidia` where there is no device is an error naming the missing file (or, in a
//! build without the backend, saying so) — never a silent fallback to the simulator.

#[cfg(not(loom))]
use omega_hal::ctable::{self, OmegaGpuPlatform, TablePlatform, TableRefusal};
use omega_hal::sim::Sim;
use omega_hal::Platform;

use crate::error::{Error, PlatformError, Result};
#[cfg(not(loom))]
use crate::session::Runtime;
use crate::sync::{Arc, ProcessMutex, Weak};

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
            other => Err(Error::Platform(PlatformError::UnknownName(other.to_string()))),
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
///
/// What it holds is the core's: the typed API and the C layer never reach the service table or the
/// simulator through it (docs/design.md, "Layers"). Tests reach the simulator through the one door meant
/// for them, [`crate::testing`].
#[derive(Clone)]
pub struct Installed {
    /// The service table.
    pub(in crate::core) platform: Arc<dyn Platform>,
    /// The simulator, for fault injection and kernel registration.
    pub(in crate::core) sim: Option<Arc<Sim>>,
}

impl Installed {
    /// A fresh simulator. It runs no host kernel yet: the loader registers a repository kernel's host
    /// reference when it loads that kernel ([`crate::kernels::simulator`] is one with all of them).
    pub fn sim() -> Self {
        Self::simulator(Sim::new())
    }

    /// The simulator `sim`, as it is (a configured one, say): the runtime may inject its faults and
    /// register its host kernels.
    pub fn simulator(sim: Arc<Sim>) -> Self {
        Installed { platform: sim.clone(), sim: Some(sim) }
    }

    /// A platform that is not the simulator to the runtime (a C program's table, or a simulator behind
    /// one): no fault injection, no host kernels.
    pub fn platform(platform: Arc<dyn Platform>) -> Self {
        Installed { platform, sim: None }
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

#[cfg(not(loom))]
/// The service table of `installed` as the C platform contract lays it out (`omega_gpu_platform_sim`).
pub(crate) fn export_table(installed: Installed) -> OmegaGpuPlatform {
    ctable::export(installed.platform)
}

/// Why a C program's service table was not installed.
#[cfg(not(loom))]
#[derive(Debug)]
pub(crate) enum TableInstallError {
    /// The table breaks the platform contract (its ABI, a missing callback, ...).
    Table(TableRefusal),
    /// The runtime refused the install (the lock, an open device, a latch).
    Install(Error),
}

#[cfg(not(loom))]
/// Installs a C program's service table as `rt`'s platform, under `name` (checked by the caller).
///
/// # Safety
/// - `*table` keeps the rules of `OmegaGpuPlatform`'s Safety section (those of [`TablePlatform::new`]) for
///   as long as it stays installed.
pub(crate) unsafe fn install_table(
    rt: &Runtime,
    table: &OmegaGpuPlatform,
    name: &'static str,
) -> core::result::Result<(), TableInstallError> {
    // SAFETY: forwarded from the caller: the callbacks keep their services' rules while installed, and
    // `release` is called once, after the last of them, which is what TablePlatform::new needs.
    let platform = unsafe { TablePlatform::new(table, name) }.map_err(TableInstallError::Table)?;
    rt.install(Installed::platform(platform.clone())).map_err(TableInstallError::Install)?;
    platform.adopt();
    Ok(())
}

/// The NVIDIA platform, or what this machine lacks for it. Without the device files the reason is the
/// kernel module when none is loaded (nothing under `/proc/driver/nvidia`), else the missing files.
#[cfg(all(target_os = "linux", feature = "nvidia"))]
fn nvidia() -> Result<Installed> {
    match omega_hal::nvidia::Nvidia::probe() {
        Ok(nv) => Ok(Installed::platform(nv)),
        Err(omega_hal::HalError::NoDevice(missing_files)) => {
            Err(match crate::doctor::module_version(std::path::Path::new("/")) {
                Err(no_module) => Error::Platform(PlatformError::NoKernelModule(no_module)),
                // The backend's text already names the platform and the missing files.
                Ok(_) => Error::Platform(PlatformError::MissingDeviceFiles(missing_files)),
            })
        }
        Err(other) => Err(Error::Platform(PlatformError::Probe(other))),
    }
}

#[cfg(all(target_os = "linux", not(feature = "nvidia")))]
fn nvidia() -> Result<Installed> {
    Err(Error::Platform(PlatformError::NoNvidiaBackend))
}

#[cfg(not(target_os = "linux"))]
fn nvidia() -> Result<Installed> {
    Err(Error::Platform(PlatformError::NotLinux))
}

/// Which runtime holds which platform instance, for as long as the instance exists.
type Claims = Vec<(Weak<dyn Platform>, Weak<()>)>;

/// Binds `platform` to the runtime whose identity is `owner`. A platform instance is the device: its open
/// state, its buffers and the latch that keeps them are one runtime's, and a second runtime on it would open
/// the open device again, miss the latch, and release the first one's parked buffers at its close. So the
/// first runtime that takes an instance keeps it for as long as the instance exists, even after that
/// runtime is gone (it may have left the device open or latched); any other is refused, stage `platform`.
pub(crate) fn claim(platform: &Arc<dyn Platform>, owner: &Arc<()>) -> Result<()> {
    static CLAIMS: ProcessMutex<Claims> = ProcessMutex::new(Vec::new());
    let mut claims = CLAIMS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    // An instance nothing refers to any more can never be reached again: forget it.
    claims.retain(|(p, _)| p.strong_count() > 0);
    let key = Arc::as_ptr(platform);
    // The Weak entries keep each instance's and each identity's allocation, so an address seen here is
    // never reused by another instance or runtime while its entry exists.
    match claims.iter().find(|(p, _)| std::ptr::addr_eq(p.as_ptr(), key)) {
        Some((_, o)) if std::ptr::eq(o.as_ptr(), Arc::as_ptr(owner)) => Ok(()),
        Some(_) => Err(Error::Platform(PlatformError::ClaimedByAnotherRuntime { platform: platform.name() })),
        None => {
            claims.push((Arc::downgrade(platform), Arc::downgrade(owner)));
            Ok(())
        }
    }
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
            Err(Error::Platform(why)) => {
                assert!(matches!(why, PlatformError::NoNvidiaBackend | PlatformError::NotLinux), "{why}")
            }
            Err(other) => panic!("wrong error: {other}"),
            Ok(p) => panic!("installed {} instead of refusing", p.name()),
        }
        assert_eq!(Installed::new(PlatformKind::Sim).map(|p| p.name()).ok(), Some("sim"));
    }
}
