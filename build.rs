//! Assembles every `kernels/<name>.ptx` into an sm_90 cubin with ptxas and writes `$OUT_DIR/cubins.rs`,
//! which `src/kernels/mod.rs` includes.
//!
//! ptxas is what `tools/find_ptxas.sh` finds, the one lookup the repository's scripts share: `$OMEGA_PTXAS`
//! (when set, the only candidate), `ptxas` on `PATH`, `/usr/local/cuda/bin/ptxas`, then the
//! `nvidia-cuda-nvcc` pip wheel whichever Python installed it (every python3 and python3.N on `PATH` is
//! asked, then the usual site-packages directories are searched). Without ptxas the build still succeeds
//! and every `cubin()` says why there is none; with ptxas, a PTX file it rejects fails the build with
//! ptxas's own message.

use std::env;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The GPU architecture the cubins are built for.
const ARCH: &str = "sm_90";

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let kernels_dir = manifest_dir.join("kernels");

    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-changed=tools/find_ptxas.sh");
    for var in ["OMEGA_PTXAS", "OMEGA_PYTHON", "PYENV_ROOT"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    // A ptxas installed or removed later is only noticed through PATH.
    println!("cargo:rerun-if-env-changed=PATH");

    let kernels = kernel_sources(&kernels_dir);
    let ptxas = find_ptxas(&manifest_dir.join("tools/find_ptxas.sh"));
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

/// The ptxas `script` (tools/find_ptxas.sh) finds, or why there is none.
fn find_ptxas(script: &Path) -> Result<PathBuf, String> {
    let out = Command::new("bash")
        .arg(script)
        .output()
        .map_err(|e| format!("ptxas not found: cannot run bash {}: {e}", script.display()))?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if out.status.success() && !path.is_empty() {
        return Ok(PathBuf::from(path));
    }
    let why = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    Err(if why.is_empty() { format!("ptxas not found: {} failed ({})", script.display(), out.status) } else { why })
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
