//! The repository's own tooling as a new user meets it: `make help` lists every target with what it
//! does, and the header generator installs its pinned cbindgen into the checkout's tool directory, never
//! into the user's global cargo directory.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn make_help_lists_every_target_with_its_description() {
    let out = Command::new("make")
        .args(["-s", "--no-print-directory", "help"])
        .current_dir(ROOT)
        .output()
        .expect("make runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let help = String::from_utf8_lossy(&out.stdout);
    let mut files = vec![PathBuf::from(ROOT).join("Makefile")];
    let mut mk: Vec<PathBuf> = fs::read_dir(Path::new(ROOT).join("mk")).unwrap().map(|e| e.unwrap().path()).collect();
    mk.retain(|p| p.extension().is_some_and(|e| e == "mk"));
    files.extend(mk);
    let mut targets = Vec::new();
    for f in files {
        for line in fs::read_to_string(&f).unwrap().lines() {
            let Some((name, _)) = line.split_once(':') else { continue };
            if !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
                targets.push(name.to_owned());
            }
        }
    }
    assert!(targets.len() > 15, "{targets:?}");
    for t in &targets {
        let line = help.lines().find(|l| l.split_whitespace().next() == Some(t.as_str()));
        let line = line.unwrap_or_else(|| panic!("`make help` does not list `{t}`:\n{help}"));
        assert!(!line.contains("(undocumented)"), "`{t}` has no description above it: {line}");
    }
}

#[test]
fn the_header_generator_installs_cbindgen_into_the_checkouts_tool_directory() {
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("tooling-cbindgen");
    let _ = fs::remove_dir_all(&scratch);
    let bin = scratch.join("bin");
    fs::create_dir_all(&bin).unwrap();
    // A cargo that records how it was asked, on a PATH with no cbindgen at all.
    let log = scratch.join("cargo-args");
    let cargo = bin.join("cargo");
    fs::write(&cargo, format!("#!/bin/sh\necho \"$@\" > {}\n", log.display())).unwrap();
    fs::set_permissions(&cargo, fs::Permissions::from_mode(0o755)).unwrap();
    let dirname = Command::new("sh").args(["-c", "command -v dirname"]).output().unwrap();
    std::os::unix::fs::symlink(String::from_utf8_lossy(&dirname.stdout).trim(), bin.join("dirname")).unwrap();
    let tools = scratch.join("tools");
    let bash = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("bash"))
        .find(|p| p.is_file())
        .expect("bash on PATH");
    let out = Command::new(bash)
        .arg(Path::new(ROOT).join("tools/gen_headers.sh"))
        .arg("--install")
        .env_clear()
        .env("PATH", &bin)
        .env("HOME", scratch.join("home"))
        .env("OMEGA_TOOLS_DIR", &tools)
        .output()
        .expect("bash runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let args = fs::read_to_string(&log).expect("cargo was asked to install cbindgen");
    assert_eq!(
        args.trim(),
        format!("install --quiet --locked --root {} cbindgen --version 0.29.4", tools.display()),
        "installed into the tool directory, not ~/.cargo"
    );
    assert!(stderr.contains(&format!("installing it into {}", tools.display())), "it says so: {stderr}");
}
