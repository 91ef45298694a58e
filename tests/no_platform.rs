//! Opening where no platform can be installed, the way a user does it: take the lock, then open. The
//! failure must name stage `platform` and the real cause, and nothing after it (the lock's release, close,
//! command-list create) may answer with a lock error that hides the cause, nor leave one for C to read.
//!
//! The platform is chosen from `OMEGA_PLATFORM` once per process, so each case runs in a child process of
//! this test binary with the variable set (the parent re-runs itself with `--exact <case>`).

mod common;

use std::path::Path;
use std::process::Command;

use common::c_last_error;
use omega::cmdlist::CmdList;
use omega::session::runtime;
use omega::Error;

/// Set in the child: the case runs its checks instead of spawning.
const CHILD: &str = "OMEGA_NO_PLATFORM_CHILD";

/// Runs test `case` of this binary in a child process with `OMEGA_PLATFORM=platform`.
fn in_child(case: &str, platform: &str) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new(exe)
        .args([case, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .env("OMEGA_PLATFORM", platform)
        .output()
        .expect("the test binary runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "OMEGA_PLATFORM={platform} {case} failed:\n{text}");
    assert!(text.contains("1 passed"), "the child ran no test:\n{text}");
}

/// What a user sees when `OMEGA_PLATFORM` names no installable platform: the open, and every call after
/// it that would have needed the lock, report `cause` under stage `platform` — the same failure, never a
/// lock error that hides it.
fn open_reports(cause: &str) {
    let err = omega::lock().open().expect_err("no platform, so no open");
    assert!(matches!(err.error, Error::Platform(_)), "{}", err.error);
    assert!(err.error.to_string().contains(cause), "{}", err.error);
    let failure = err.error.clone();
    drop(err); // releases the token: there was no lock to release, and that is no lock error

    // The raw unlock says why there is no lock to release: the platform's failure, not a lock misuse.
    assert_eq!(runtime().unlock(), Err(failure.clone()));
    assert_eq!(runtime().close(), Err(failure.clone()), "close cannot take a lock that does not exist");
    let create = CmdList::create(runtime(), None).expect_err("no platform, so no list");
    assert_eq!(Error::from(create), failure);

    // `?` turns the open error into the crate's error, stage and all.
    fn open() -> Result<(), omega::Error> {
        let _dev = omega::lock().open()?;
        Ok(())
    }
    assert_eq!(open(), Err(failure.clone()));

    // The C layer records each of those failures as it returns it: C reads the cause after every call.
    omega::ffi::session::omega_gpu_session_unlock();
    assert_eq!(c_last_error(), failure.to_string());
    omega::ffi::session::omega_gpu_session_close();
    assert_eq!(c_last_error(), failure.to_string());
    assert!(c_last_error().starts_with("platform: ") && c_last_error().contains(cause), "{}", c_last_error());
}

#[test]
fn an_unknown_platform_is_named_by_open_and_nothing_after_blames_the_lock() {
    if std::env::var_os(CHILD).is_none() {
        return in_child("an_unknown_platform_is_named_by_open_and_nothing_after_blames_the_lock", "bogus");
    }
    open_reports("unknown platform `bogus` (expected `sim` or `nvidia`)");
}

#[test]
fn forcing_nvidia_without_a_gpu_names_what_is_missing() {
    if std::env::var_os(CHILD).is_none() {
        return in_child("forcing_nvidia_without_a_gpu_names_what_is_missing", "nvidia");
    }
    if !Path::new("/proc/driver/nvidia/version").exists() {
        open_reports("nvidia: no NVIDIA kernel module loaded");
    } else if !Path::new("/dev/nvidiactl").exists() {
        open_reports("/dev/nvidiactl");
    } else {
        // A machine with the driver: the same path opens the GPU.
        let dev = omega::lock().open().expect("the GPU opens where the driver is");
        assert_eq!(dev.platform(), "nvidia");
    }
}
