//! The CUDA tool lookup every user of ptxas and nvcc shares (`tools/find_cuda_tool.sh`, through
//! `tools/find_ptxas.sh` and `tools/find_nvcc.sh`: build.rs, tools/gpu/build.sh,
//! hal/tests/fixtures/build.sh), run against a fake machine: the `nvidia-cuda-nvcc` wheel is found
//! whichever Python installed it, not only the one `python3` names, and nvcc is found the same way.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const PTXAS_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/find_ptxas.sh");
const NVCC_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tools/find_nvcc.sh");

fn executable(path: &Path, body: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// A machine with no ptxas on PATH and no CUDA, where `python3` has no `nvidia` package and the wheel
/// was installed by another interpreter, `python3.12`, which lives in `interpreters/`.
fn machine(tag: &str) -> (PathBuf, PathBuf) {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("find-ptxas-{tag}"));
    let _ = fs::remove_dir_all(&root);
    let site = root.join("site-packages/nvidia");
    executable(&site.join("cu13/bin/ptxas"), "echo 'Cuda compilation tools, release 13.0, V13.0.88'");
    executable(&site.join("cu13/bin/nvcc"), "echo 'Cuda compilation tools, release 13.0, V13.0.88'");
    executable(&root.join("bin/python3"), "echo \"ModuleNotFoundError: No module named 'nvidia'\" >&2; exit 1");
    executable(&root.join("interpreters/python3.12"), &format!("echo '{}'", site.display()));
    (root, site.join("cu13/bin/ptxas"))
}

/// This machine's bash (the fake machine's PATH has none: it holds only the fakes, so no real ptxas or
/// Python on it can answer first).
fn bash() -> PathBuf {
    std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("bash"))
        .find(|p| p.is_file())
        .expect("bash on PATH")
}

fn find(env: &[(&str, String)]) -> (bool, String, String) {
    find_with(PTXAS_SCRIPT, env)
}

fn find_with(script: &str, env: &[(&str, String)]) -> (bool, String, String) {
    let mut cmd = Command::new(bash());
    cmd.arg(script)
        .env_clear()
        .env("HOME", "/nonexistent")
        .env("PYENV_ROOT", "/nonexistent")
        .env("CUDA_HOME", "/nonexistent");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("bash runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        String::from_utf8_lossy(&out.stderr).trim().to_owned(),
    )
}

#[test]
fn the_wheel_is_found_through_any_python_on_path_not_only_python3() {
    let (root, ptxas) = machine("path");
    let path = format!("{}:{}", root.join("bin").display(), root.join("interpreters").display());
    let (ok, found, why) = find(&[("PATH", path)]);
    assert!(ok, "{why}");
    assert_eq!(found, ptxas.display().to_string());
}

#[test]
fn omega_python_names_an_interpreter_that_is_not_on_path() {
    let (root, ptxas) = machine("omega-python");
    let path = root.join("bin").display().to_string();
    let python = root.join("interpreters/python3.12").display().to_string();
    let (ok, found, why) = find(&[("PATH", path), ("OMEGA_PYTHON", python)]);
    assert!(ok, "{why}");
    assert_eq!(found, ptxas.display().to_string());
}

#[test]
fn omega_ptxas_is_the_only_candidate_when_set() {
    let (root, _) = machine("explicit");
    let path = format!("{}:{}", root.join("bin").display(), root.join("interpreters").display());
    let (ok, _, why) = find(&[("PATH", path), ("OMEGA_PTXAS", "/nonexistent/ptxas".into())]);
    assert!(!ok, "the wheel on PATH is not consulted when OMEGA_PTXAS is set");
    assert!(why.starts_with("ptxas not found: "), "{why}");
    assert!(why.contains("OMEGA_PTXAS=/nonexistent/ptxas does not run"), "{why}");
}

#[test]
fn nvcc_is_found_by_the_same_lookup_in_the_same_wheel() {
    let (root, ptxas) = machine("nvcc");
    let path = format!("{}:{}", root.join("bin").display(), root.join("interpreters").display());
    let (ok, found, why) = find_with(NVCC_SCRIPT, &[("PATH", path)]);
    assert!(ok, "{why}");
    assert_eq!(found, ptxas.with_file_name("nvcc").display().to_string());
}

#[test]
fn omega_nvcc_is_the_only_candidate_when_set_and_the_advice_names_the_pinned_set() {
    let (root, _) = machine("explicit-nvcc");
    let path = format!("{}:{}", root.join("bin").display(), root.join("interpreters").display());
    let (ok, _, why) = find_with(NVCC_SCRIPT, &[("PATH", path), ("OMEGA_NVCC", "/nonexistent/nvcc".into())]);
    assert!(!ok, "the wheel on PATH is not consulted when OMEGA_NVCC is set");
    assert!(why.starts_with("nvcc not found: OMEGA_NVCC=/nonexistent/nvcc does not run"), "{why}");
    // nvcc's own wheel leaves its siblings unpinned: the advice is the whole pinned set.
    assert!(why.contains("nvidia-cuda-crt==13.0.88") && why.contains("nvidia-nvvm==13.0.88"), "{why}");
}
