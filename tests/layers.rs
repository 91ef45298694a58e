//! The wall between the layers of `omega` (docs/design.md, "Layers"), checked over the sources: only
//! `src/core/` names `omega_hal`, and the test-support door (`omega::testing`) is used by no shell file
//! but the C layer's simulator fault hook, the door C tests inject faults through.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The lines of `file` that are code, not comments, each with its number.
fn code_lines(file: &Path) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(file).unwrap();
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .map(|(i, l)| (i + 1, l.to_owned()))
        .collect()
}

/// Every `.rs` file under src/ outside src/core/, relative to the crate root.
fn shell_files() -> Vec<(PathBuf, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    let core = root.join("src/core");
    files.into_iter().filter(|f| !f.starts_with(&core)).map(|f| (f.strip_prefix(root).unwrap().to_owned(), f)).collect()
}

#[test]
fn only_the_core_names_omega_hal() {
    let files = shell_files();
    assert!(files.iter().any(|(rel, _)| rel == Path::new("src/api/locked.rs")), "the scan found the typed API");
    let mut found = Vec::new();
    for (rel, path) in &files {
        for (n, line) in code_lines(path) {
            if line.contains("omega_hal") {
                found.push(format!("{}:{n}: {}", rel.display(), line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "outside src/core/ no file may use omega_hal (reach the device through the core's interface):\n{}",
        found.join("\n")
    );
}

#[test]
fn only_the_c_fault_hook_uses_the_test_door() {
    let mut found = Vec::new();
    for (rel, path) in shell_files() {
        if rel == Path::new("src/ffi/platform.rs") || rel == Path::new("src/lib.rs") {
            continue;
        }
        for (n, line) in code_lines(&path) {
            if line.contains("testing::") {
                found.push(format!("{}:{n}: {}", rel.display(), line.trim()));
            }
        }
    }
    assert!(found.is_empty(), "the typed API and the C layer do not reach the simulator:\n{}", found.join("\n"));
}

/// The demo kernels of kernels/ are not wired into the simulator the core installs (the platform install
/// knows nothing of them); loading a repository kernel is what registers its host reference.
#[test]
fn a_simulator_the_core_installs_runs_a_demo_kernel_only_once_it_is_loaded() {
    let lock = omega::lock();
    lock.set_platform(omega::PlatformKind::Sim).unwrap();
    let sim = omega::testing::simulator().expect("the simulator was just installed");
    assert!(!sim.has_kernel("vector_add"), "a fresh simulator runs no repository kernel");
    let dev = lock.open().unwrap();
    let out = dev.scope(|s, _gpu| s.load("vector_add").map(|_| ()));
    out.value().unwrap();
    assert!(sim.has_kernel("vector_add"), "loading the kernel registered its host reference");
    assert!(!sim.has_kernel("scale_copy"), "and no other");
}
