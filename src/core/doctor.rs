//! The preflight check behind `make doctor`: can Omega's nvidia platform run on this machine, and if not,
//! what does the GPU path lack? And does the simulator run here?
//!
//! It reads what the driver publishes (`/proc/driver/nvidia`), the device files and the PCI device, picks
//! the driver ABI table entry, and finally opens the device through Omega itself. Every check runs and
//! says what it found, so one report names everything the GPU path lacks, not only the first; the one
//! exception is the open, which is not tried while an earlier check failed (an unknown driver ABI must not
//! be sent ioctls) and says so. Beside the GPU path it runs a vector add on the `sim` platform, which
//! needs nothing of the machine. All paths hang off a root so tests can point it at a fake tree.

use std::fs;
use std::path::{Path, PathBuf};

/// One line of the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Check {
    /// What was checked.
    pub what: &'static str,
    /// What was found (the reason, when it failed).
    pub found: String,
    /// Whether Omega can run as far as this check is concerned.
    pub ok: bool,
}

/// What the doctor found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// The checks of the GPU path (the nvidia platform), in the order they ran.
    pub checks: Vec<Check>,
    /// The simulator: a vector add on the `sim` platform (which needs nothing of the machine), when it
    /// was asked for.
    pub sim: Option<Check>,
}

impl Report {
    fn push(&mut self, what: &'static str, r: Result<String, String>) -> bool {
        let ok = r.is_ok();
        let found = r.unwrap_or_else(|e| e);
        self.checks.push(Check { what, found, ok });
        ok
    }

    /// True when every check of the GPU path passed: the nvidia platform can run here.
    pub fn ok(&self) -> bool {
        self.checks.iter().all(|c| c.ok)
    }

    /// The first failure of the GPU path, as "what: reason".
    pub fn reason(&self) -> Option<String> {
        self.failures().into_iter().next()
    }

    /// Every failure of the GPU path, as "what: reason", in the order the checks ran.
    pub fn failures(&self) -> Vec<String> {
        self.checks.iter().filter(|c| !c.ok).map(|c| format!("{}: {}", c.what, c.found)).collect()
    }
}

/// The kernel module's version line: flavour ("open" or "proprietary") and version.
pub fn module_version(root: &Path) -> Result<(String, String), String> {
    let p = root.join("proc/driver/nvidia/version");
    let text = fs::read_to_string(&p).map_err(|e| format!("no NVIDIA kernel module loaded ({}: {e})", p.display()))?;
    let line = text.lines().find(|l| l.starts_with("NVRM version:")).ok_or("no `NVRM version:` line")?;
    let flavour = if line.contains("Open Kernel Module") { "open" } else { "proprietary" };
    let version = line
        .split_whitespace()
        .find(|w| w.chars().next().is_some_and(|c| c.is_ascii_digit()) && w.contains('.'))
        .ok_or_else(|| format!("no version number in {line:?}"))?;
    Ok((flavour.to_owned(), version.to_owned()))
}

fn device_file(root: &Path, name: &str) -> Result<String, String> {
    use std::os::unix::fs::FileTypeExt;
    let p = root.join("dev").join(name);
    let meta = fs::metadata(&p).map_err(|e| format!("{}: {e}", p.display()))?;
    if root == Path::new("/") && !meta.file_type().is_char_device() {
        return Err(format!("{} is not a character device", p.display()));
    }
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
    // SAFETY: `c` is a NUL-terminated path that lives across the call; access reads nothing else.
    if unsafe { libc::access(c.as_ptr(), libc::R_OK | libc::W_OK) } != 0 {
        return Err(format!("{} is not readable and writable by this user", p.display()));
    }
    Ok(format!("{} rw", p.display()))
}

/// The GPUs the driver lists: (bus location, model).
pub fn gpus(root: &Path) -> Vec<(String, String)> {
    let dir = root.join("proc/driver/nvidia/gpus");
    let mut out = Vec::new();
    for entry in fs::read_dir(&dir).into_iter().flatten().flatten() {
        let text = fs::read_to_string(entry.path().join("information")).unwrap_or_default();
        let field =
            |k: &str| text.lines().find_map(|l| l.strip_prefix(k).map(|v| v.trim().to_owned())).unwrap_or_default();
        out.push((field("Bus Location:"), field("Model:")));
    }
    out.sort();
    out
}

fn pci_ids(root: &Path, bus: &str) -> Result<String, String> {
    let dev: PathBuf = root.join("sys/bus/pci/devices").join(bus.to_ascii_lowercase());
    let read = |f: &str| fs::read_to_string(dev.join(f)).map(|s| s.trim().trim_start_matches("0x").to_owned());
    let vendor = read("vendor").map_err(|e| format!("{}: {e}", dev.display()))?;
    let device = read("device").map_err(|e| format!("{}: {e}", dev.display()))?;
    if vendor != "10de" {
        return Err(format!("PCI device {bus} has vendor {vendor}, not NVIDIA (10de)"));
    }
    Ok(format!("{bus} {vendor}:{device}"))
}

/// Runs every check under `root` ("/" for this machine). With `open_device`, the last check opens the
/// device through Omega's nvidia platform and reports what it is (not tried while an earlier check
/// failed). With `simulator`, the report also says whether the `sim` platform runs ([`Report::sim`]).
pub fn run(root: &Path, open_device: bool, simulator: bool) -> Report {
    let mut r = Report::default();
    let module = module_version(root);
    let version = module.as_ref().ok().map(|(_, v)| v.clone());
    let flavour_ok = module.as_ref().is_ok_and(|(f, _)| f == "open");
    r.push(
        "kernel module",
        module.and_then(|(f, v)| {
            if flavour_ok {
                Ok(format!("NVIDIA open kernel module {v}"))
            } else {
                Err(format!("the {f} kernel module {v} is loaded; Omega is verified on the open module only"))
            }
        }),
    );
    r.push(
        "driver ABI table",
        match &version {
            Some(v) => omega_hal::nvidia::abi::lookup(v)
                .map(|a| format!("branch {}.x ({:?}, verified with {})", a.major, a.status, a.verified_with))
                .map_err(|e| e.to_string()),
            None => Err("no kernel module version to look up (see the kernel module check)".into()),
        },
    );
    for f in ["nvidiactl", "nvidia-uvm", "nvidia0"] {
        r.push("device file", device_file(root, f));
    }
    let gpus = gpus(root);
    if gpus.is_empty() {
        r.push("PCI device", Err("the driver lists no GPU under /proc/driver/nvidia/gpus".into()));
    }
    for (bus, model) in &gpus {
        r.push("PCI device", pci_ids(root, bus).map(|ids| format!("{ids} {model}")));
    }
    if open_device {
        let failed = r.checks.iter().filter(|c| !c.ok).count();
        let open = if failed == 0 {
            open_nvidia()
        } else {
            Err(format!(
                "not tried: {failed} check(s) above failed, and the driver must not be sent ioctls it may not know"
            ))
        };
        r.push("open", open);
    }
    if simulator {
        let sim = simulator_runs();
        r.sim = Some(Check { what: "sim platform", ok: sim.is_ok(), found: sim.unwrap_or_else(|e| e) });
    }
    r
}

/// A vector add on a private runtime over a fresh simulator, through the job engine's session backend
/// (the calls a program makes: alloc, sync, the repository's `vector_add`, the two-marker wait, readback),
/// checked element by element.
fn simulator_runs() -> Result<String, String> {
    use crate::engine::{execute_on, Job, SessionBackend};
    // One simulator runtime per process: the engine's backend borrows it for good. Its simulator is a
    // fresh instance, which no other runtime can hold.
    static SIM: crate::sync::OnceLock<Option<crate::session::Runtime>> = crate::sync::OnceLock::new();
    let rt = SIM
        .get_or_init(|| crate::session::Runtime::with_platform(crate::kernels::simulator()).ok())
        .as_ref()
        .ok_or("a runtime over a fresh simulator could not be made")?;
    let n = 4096usize;
    let a: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let b: Vec<f32> = (0..n).map(|i| 0.5 * i as f32).collect();
    let mut out = vec![f32::NAN; n];
    let job = Job::vector_1d(&a, &b, &mut out).map_err(|e| e.to_string())?;
    rt.lock().map_err(|e| e.to_string())?;
    let result = execute_on(&mut SessionBackend::on(rt), &job);
    let info = rt.device_info();
    // Not refused: this thread took the lock above and pins nothing.
    let _ = rt.unlock();
    let _ = rt.close();
    if result.failure() != Some(crate::engine::Failure::Ok) {
        return Err(format!("a vector add on the simulator failed: {}", result.detail()));
    }
    let want = crate::kernels::vector_add_ref(&a, &b);
    if out != want {
        return Err("a vector add on the simulator gave wrong sums".into());
    }
    let name = info.map(|i| i.name).unwrap_or_default();
    Ok(format!("runs here ({name}): a vector add of {n} elements matched the CPU; OMEGA_PLATFORM=sim selects it"))
}

fn open_nvidia() -> Result<String, String> {
    let installed = crate::platform::Installed::new(crate::PlatformKind::Nvidia).map_err(|e| e.to_string())?;
    let platform = installed.platform.clone();
    let rt = crate::session::Runtime::with_platform(installed).map_err(|e| e.to_string())?;
    rt.lock().map_err(|e| e.to_string())?;
    let r = rt.open().map(|()| rt.device_info().expect("open"));
    // Read while open: what the platform chose (which signal names a fault, say) is part of the report.
    let notes: String = platform.notes().iter().map(|(what, note)| format!("; {what}: {note}")).collect();
    // Not refused: this thread took the lock above and pins nothing.
    let _ = rt.unlock();
    let info = r.map_err(|e| e.to_string())?;
    let _ = rt.close();
    Ok(format!(
        "{} sm_{}{}, {} SMs, {} MiB, driver {}, {}{notes}",
        info.name,
        info.arch_major,
        info.arch_minor,
        info.sm_count,
        info.memory_bytes >> 20,
        info.driver_version,
        info.pci
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake root named by `tag` (unique per call site, so tests running in parallel never share one).
    fn tree(tag: &str, version_line: &str, perms: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let root = std::env::temp_dir().join(format!("omega-doctor-{}-{tag}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("proc/driver/nvidia/gpus/0000:00:06.0")).unwrap();
        fs::create_dir_all(root.join("dev")).unwrap();
        fs::create_dir_all(root.join("sys/bus/pci/devices/0000:00:06.0")).unwrap();
        fs::write(root.join("proc/driver/nvidia/version"), format!("{version_line}\nGCC version: 13\n")).unwrap();
        fs::write(
            root.join("proc/driver/nvidia/gpus/0000:00:06.0/information"),
            "Model: \t\t NVIDIA H200\nBus Location: \t 0000:00:06.0\n",
        )
        .unwrap();
        fs::write(root.join("sys/bus/pci/devices/0000:00:06.0/vendor"), "0x10de\n").unwrap();
        fs::write(root.join("sys/bus/pci/devices/0000:00:06.0/device"), "0x2335\n").unwrap();
        for f in ["nvidiactl", "nvidia-uvm", "nvidia0"] {
            let p = root.join("dev").join(f);
            fs::write(&p, "").unwrap();
            fs::set_permissions(&p, fs::Permissions::from_mode(perms)).unwrap();
        }
        root
    }

    const OPEN_580: &str =
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22)";

    #[test]
    fn a_supported_machine_passes_every_check() {
        let root = tree("ok", OPEN_580, 0o666);
        let r = run(&root, false, false);
        assert!(r.ok(), "{r:?}");
        assert_eq!(module_version(&root).unwrap(), ("open".into(), "580.159.04".into()));
        assert!(r.checks.iter().any(|c| c.found.contains("10de:2335 NVIDIA H200")));
    }

    #[test]
    fn each_failure_is_named() {
        let r = run(&tree("old-branch", &OPEN_580.replace("580.159.04", "575.51.03"), 0o666), false, false);
        assert!(r.reason().unwrap().starts_with("driver ABI table: unsupported driver: kernel driver 575.51.03"));
        let r =
            run(&tree("proprietary", &OPEN_580.replace("Open Kernel Module", "Kernel Module"), 0o666), false, false);
        assert!(r.reason().unwrap().contains("proprietary kernel module"), "{:?}", r.reason());
        let r = run(Path::new("/nonexistent-root"), false, false);
        assert!(r.reason().unwrap().starts_with("kernel module: no NVIDIA kernel module loaded"));
        // SAFETY: geteuid has no preconditions and cannot fail.
        let is_root = unsafe { libc::geteuid() } == 0;
        if !is_root {
            // Root passes access() whatever the mode bits say, so only an ordinary user can see this one.
            let r = run(&tree("read-only", OPEN_580, 0o400), false, false);
            assert!(r.reason().unwrap().contains("not readable and writable"), "{:?}", r.reason());
        }
    }

    #[test]
    fn a_machine_without_the_driver_gets_every_check_and_hears_that_sim_runs() {
        let r = run(Path::new("/nonexistent-root"), true, true);
        assert!(!r.ok());
        let what: Vec<&str> = r.checks.iter().map(|c| c.what).collect();
        assert_eq!(
            what,
            ["kernel module", "driver ABI table", "device file", "device file", "device file", "PCI device", "open"],
            "every check ran, not only the first"
        );
        assert!(r.checks.iter().all(|c| !c.ok), "{r:?}");
        let failures = r.failures();
        assert!(failures[0].starts_with("kernel module: no NVIDIA kernel module loaded"), "{failures:?}");
        assert!(failures[2].starts_with("device file: /nonexistent-root/dev/nvidiactl"), "{failures:?}");
        assert!(failures[6].starts_with("open: not tried: 6 check(s) above failed"), "{failures:?}");
        let sim = r.sim.expect("the simulator was asked for");
        assert!(sim.ok, "{sim:?}");
        assert!(sim.found.contains("a vector add of 4096 elements matched the CPU"), "{sim:?}");
    }

    #[test]
    fn a_failed_check_does_not_hide_the_ones_after_it() {
        let root = tree("old-and-missing", &OPEN_580.replace("580.159.04", "575.51.03"), 0o666);
        fs::remove_file(root.join("dev/nvidia-uvm")).unwrap();
        let failures = run(&root, false, false).failures();
        assert_eq!(failures.len(), 2, "{failures:?}");
        assert!(failures[0].starts_with("driver ABI table: unsupported driver"), "{failures:?}");
        assert!(failures[1].contains("nvidia-uvm"), "{failures:?}");
    }
}
