//! Assembles every `kernels/<name>.ptx` into an sm_90 cubin with ptxas and writes `$OUT_DIR/cubins.rs`,
//! which `src/kernels/mod.rs` includes.
//!
//! ptxas is looked for in this order: `$OMEGA_PTXAS` (when set, it is the only candidate), `ptxas` on
//! `PATH`, `/usr/local/cuda/bin/ptxas`, then the `nvidia-cuda-nvcc` Python wheel (`nvidia/cu13/bin/ptxas`
//! or `nvidia/cuda_nvcc/bin/ptxas` beside the `nvidia` package `python3` imports). Without ptxas the
//! build still succeeds and every `cubin()` says why there is none; with ptxas, a PTX file it rejects
//! fails the build with ptxas's own message.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The GPU architecture the cubins are built for.
const ARCH: &str = "sm_90";

/// What to do when no ptxas can be found.
const HOW_TO_GET_PTXAS: &str =
    "set OMEGA_PTXAS, put ptxas on PATH, install CUDA in /usr/local/cuda, or `pip install nvidia-cuda-nvcc`";

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let kernels_dir = manifest_dir.join("kernels");

    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-env-changed=OMEGA_PTXAS");
    // A ptxas installed or removed later is only noticed through PATH.
    println!("cargo:rerun-if-env-changed=PATH");

    let kernels = kernel_sources(&kernels_dir);
    let ptxas = find_ptxas();
    match &ptxas {
        Ok(path) => println!("cargo:rustc-env=OMEGA_PTXAS_USED={}", path.display()),
        Err(why) => {
            println!("cargo:rustc-env=OMEGA_PTXAS_USED=none");
            println!("cargo:warning=kernels/ not assembled: {why}");
        }
    }

    let mut cubins = Vec::new();
    for (name, source) in &kernels {
        let cubin = out_dir.join(format!("{name}.{ARCH}.cubin"));
        if let Ok(ptxas) = &ptxas {
            assemble(ptxas, source, &cubin);
        }
        cubins.push((name.clone(), source.clone(), cubin));
    }

    let generated = generate(&ptxas, &cubins);
    fs::write(out_dir.join("cubins.rs"), generated).expect("write $OUT_DIR/cubins.rs");
}

/// `(name, path)` of every `kernels/*.ptx`, sorted by name. Each must define `.entry <name>`.
fn kernel_sources(dir: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let entries = fs::read_dir(dir).unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", dir.display())));
    for entry in entries {
        let path = entry.unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", dir.display()))).path();
        if path.extension().and_then(|e| e.to_str()) != Some("ptx") {
            continue;
        }
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            fail(&format!("{}: a kernel name is ASCII letters, digits and '_'", path.display()));
        }
        let text = fs::read_to_string(&path).unwrap_or_else(|e| fail(&format!("read {}: {e}", path.display())));
        if !text.contains(&format!(".entry {name}(")) {
            fail(&format!("kernels/{name}.ptx must define `.entry {name}(...)`: the file name is the kernel name"));
        }
        out.push((name, path));
    }
    out.sort();
    out
}

/// The ptxas to use, or why there is none.
fn find_ptxas() -> Result<PathBuf, String> {
    if let Some(explicit) = env::var_os("OMEGA_PTXAS").filter(|v| !v.is_empty()) {
        let path = PathBuf::from(&explicit);
        return if runs(&path) {
            Ok(path)
        } else {
            Err(format!("ptxas not found: OMEGA_PTXAS={} does not run; {HOW_TO_GET_PTXAS}", path.display()))
        };
    }
    let on_path = env::var_os("PATH").map(|p| env::split_paths(&p).map(|d| d.join("ptxas")).collect::<Vec<_>>());
    let candidates = on_path
        .unwrap_or_default()
        .into_iter()
        .chain([PathBuf::from("/usr/local/cuda/bin/ptxas")])
        .chain(wheel_candidates());
    for candidate in candidates {
        if candidate.is_file() && runs(&candidate) {
            return Ok(candidate);
        }
    }
    Err(format!("ptxas not found: {HOW_TO_GET_PTXAS}"))
}

/// Where the `nvidia-cuda-nvcc` wheel puts ptxas, for every directory of the `nvidia` namespace package
/// that `python3` can import.
fn wheel_candidates() -> Vec<PathBuf> {
    let script = "import nvidia\nfor p in nvidia.__path__: print(p)";
    let Ok(output) = Command::new("python3").args(["-c", script]).output() else {
        return Vec::new();
    };
    if !output.status.success() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for dir in String::from_utf8_lossy(&output.stdout).lines().filter(|l| !l.is_empty()) {
        let dir = PathBuf::from(dir);
        out.push(dir.join("cu13/bin/ptxas"));
        out.push(dir.join("cuda_nvcc/bin/ptxas"));
    }
    out
}

/// Whether `ptxas --version` succeeds.
fn runs(ptxas: &Path) -> bool {
    Command::new(ptxas).arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Assembles one kernel, failing the build with ptxas's message when it refuses.
fn assemble(ptxas: &Path, source: &Path, cubin: &Path) {
    let output = Command::new(ptxas)
        .arg(format!("-arch={ARCH}"))
        .arg("-o")
        .arg(cubin)
        .arg(source)
        .output()
        .unwrap_or_else(|e| fail(&format!("cannot run {}: {e}", ptxas.display())));
    if !output.status.success() {
        fail(&format!(
            "{} -arch={ARCH} {} failed ({}):\n{}{}",
            ptxas.display(),
            source.display(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
}

/// Fails the build with `message` (cargo shows a failed build script's stderr).
fn fail(message: &str) -> ! {
    eprintln!("error: {message}");
    std::process::exit(1)
}

/// The text of `cubins.rs`.
fn generate(ptxas: &Result<PathBuf, String>, cubins: &[(String, PathBuf, PathBuf)]) -> String {
    let mut s = String::new();
    s.push_str("/// Name of the ptxas that built the cubins, or why there is none.\n");
    match ptxas {
        Ok(path) => writeln!(s, "pub(crate) const PTXAS: Result<&str, &str> = Ok({:?});", path.display().to_string()),
        Err(why) => writeln!(s, "pub(crate) const PTXAS: Result<&str, &str> = Err({why:?});"),
    }
    .unwrap();

    writeln!(s, "/// The cubin of each kernel in kernels/, for {ARCH}.").unwrap();
    s.push_str("pub(crate) fn cubin(name: &str) -> Result<&'static [u8], &'static str> {\n    match name {\n");
    for (name, _, cubin) in cubins {
        match ptxas {
            Ok(_) => writeln!(s, "        {name:?} => Ok(include_bytes!({:?})),", cubin.display().to_string()),
            Err(why) => writeln!(s, "        {name:?} => Err({why:?}),"),
        }
        .unwrap();
    }
    s.push_str("        _ => Err(\"no kernel of that name in kernels/\"),\n    }\n}\n");

    s.push_str("pub(crate) const KERNEL_NAMES: &[&str] = &[");
    for (i, (name, ..)) in cubins.iter().enumerate() {
        if i > 0 {
            s.push_str(", ");
        }
        write!(s, "{name:?}").unwrap();
    }
    s.push_str("];\n");

    s.push_str("/// PTX source of each kernel (for the typed-kernel macro and docs).\n");
    s.push_str("pub(crate) fn ptx(name: &str) -> Option<&'static str> {\n    match name {\n");
    for (name, source, _) in cubins {
        writeln!(s, "        {name:?} => Some(include_str!({:?})),", source.display().to_string()).unwrap();
    }
    s.push_str("        _ => None,\n    }\n}\n");
    s
}
