//! Builds the repository's GPU code and writes `$OUT_DIR/cubins.rs`, which `src/core/kernels/mod.rs` includes:
//!
//! - every `kernels/<name>.ptx` is assembled into an sm_90 cubin with ptxas;
//! - every `kernels/cuda/<name>.cu` (CUDA C++, one module of any number of kernels) is compiled by nvcc
//!   into an sm_90a cubin (`nvcc -cubin -arch=sm_90a -O3`);
//! - every `kernels/cuda/lib/<name>.cu` (a device library, such as Omega's `vprintf`) is compiled the
//!   same way but relocatable (`-rdc=true`), its undefined symbols left for the loader, and held to
//!   registers R0..R31 (`-maxrregcount=32`): a kernel calls such a function as a CUDA "syscall", keeping
//!   its own values in R32 and up across the call, which the ordinary calling convention would let the
//!   callee clobber (see `kernels/cuda/lib/printf.cu`).
//!
//! ptxas and nvcc are what `tools/find_cuda_tool.sh` finds, the one lookup the repository's scripts
//! share: `$OMEGA_PTXAS` / `$OMEGA_NVCC` (when set, the only candidate), the tool on `PATH`,
//! `/usr/local/cuda/bin/`, then the `nvidia-cuda-nvcc` pip wheel whichever Python installed it (every
//! python3 and python3.N on `PATH` is asked, then the usual site-packages directories are searched).
//! Without a tool the build still succeeds and every lookup of what it would have built says why there is
//! none; with it, a source it rejects fails the build with the tool's own message.
//!
//! nvcc is slow (about a second a file, a minute for the template-heavy matmul module), so each CUDA cubin
//! is kept under a hash of everything that goes into it (the source, every header in `kernels/cuda/`, the
//! flags, the nvcc path and version) and compiled again only when that changes. The cache is shared by
//! every build of the checkout (`target/cubin-cache/`, or `$OMEGA_CUBIN_CACHE`): the debug and release
//! builds, clippy's, the simulator-only feature set, the loom build's own target directory and trybuild's
//! all compile the same sources, which made `make test` run nvcc over every module six times. Each build
//! copies its cubins into `$OUT_DIR/cuda/` and includes that copy, so another build replacing the shared
//! cache's files never changes one already made. Where the checkout cannot be written, `$OUT_DIR/cuda/`
//! is the cache.

use std::collections::hash_map::DefaultHasher;
use std::env;
use std::fmt::Write as _;
use std::fs;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The GPU architecture the PTX kernels are assembled for.
const ARCH: &str = "sm_90";
/// The GPU architecture the CUDA C++ modules are compiled for (Hopper with its arch-specific features:
/// wgmma, setmaxnreg, TMA multicast).
const CUDA_ARCH: &str = "sm_90a";

/// Registers a device library function may use: below R32, which the kernels that call it keep live.
const LIBRARY_MAX_REGISTERS: u32 = 32;

fn main() {
    let manifest_dir = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let kernels_dir = manifest_dir.join("kernels");

    println!("cargo:rerun-if-changed=kernels");
    println!("cargo:rerun-if-changed=tools/find_cuda_tool.sh");
    for var in ["OMEGA_PTXAS", "OMEGA_NVCC", "OMEGA_PYTHON", "PYENV_ROOT", "CUDA_HOME", "OMEGA_CUBIN_CACHE"] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    // A tool installed or removed later is only noticed through PATH.
    println!("cargo:rerun-if-env-changed=PATH");

    let finder = manifest_dir.join("tools/find_cuda_tool.sh");
    let kernels = kernel_sources(&kernels_dir);
    let ptxas = find_tool(&finder, "ptxas");
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

    let nvcc = find_tool(&finder, "nvcc");
    match &nvcc {
        Ok(path) => println!("cargo:rustc-env=OMEGA_NVCC_USED={}", path.display()),
        Err(why) => {
            println!("cargo:rustc-env=OMEGA_NVCC_USED=none");
            println!("cargo:warning=kernels/cuda/ not compiled: {why}");
        }
    }
    let cuda_dir = kernels_dir.join("cuda");
    let modules = cuda_sources(&cuda_dir);
    let libraries = cuda_sources(&cuda_dir.join("lib"));
    let (modules, libraries) = match &nvcc {
        Ok(nvcc) => {
            let key = CudaKey::new(nvcc, &cuda_dir);
            let own = out_dir.join("cuda");
            fs::create_dir_all(&own).unwrap_or_else(|e| fail(&format!("create {}: {e}", own.display())));
            let shared = shared_cache(&manifest_dir).unwrap_or_else(|| own.clone());
            let build = |list: Vec<(String, PathBuf)>, relocatable: bool| -> Vec<Built> {
                list.into_iter()
                    .map(|(name, source)| {
                        let cubin = key.compile(&source, &shared, &name, relocatable);
                        (name, source, copy_into(&cubin, &own))
                    })
                    .collect()
            };
            (build(modules, false), build(libraries, true))
        }
        Err(_) => {
            let none = |list: Vec<(String, PathBuf)>| list.into_iter().map(|(n, s)| (n, s, PathBuf::new())).collect();
            (none(modules), none(libraries))
        }
    };

    let mut generated = generate(&ptxas, &cubins);
    generated.push_str(&generate_cuda(&nvcc, &modules, &libraries));
    fs::write(out_dir.join("cubins.rs"), generated).expect("write $OUT_DIR/cubins.rs");
}

/// The cubin cache every build of this checkout shares (`$OMEGA_CUBIN_CACHE`, else `target/cubin-cache/`
/// under the checkout), or `None` where it cannot be made (a read-only checkout: each build keeps its own).
fn shared_cache(manifest_dir: &Path) -> Option<PathBuf> {
    let dir = env::var_os("OMEGA_CUBIN_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest_dir.join("target").join("cubin-cache"));
    fs::create_dir_all(&dir).ok().map(|()| dir)
}

/// Removes the cubins in `dir` named `<stem><other hash>.cubin`: a source's earlier versions, of no further
/// use. A half-written file (`.partial<pid>`, `.copy<pid>`) is left alone: another build may be writing it.
fn remove_other_versions(dir: &Path, stem: &str, keep: &Path) {
    for old in fs::read_dir(dir).into_iter().flatten().flatten().map(|e| e.path()) {
        let file = old.file_name().and_then(|f| f.to_str()).unwrap_or_default();
        if file.starts_with(stem) && file.ends_with(".cubin") && old != keep {
            let _ = fs::remove_file(&old);
        }
    }
}

/// `cubin` copied into `dir` under its own name (kept when that file is already there: the name carries
/// the hash of everything that went into it), the copy's path; the copies of its earlier versions there
/// are removed.
fn copy_into(cubin: &Path, dir: &Path) -> PathBuf {
    let file = cubin.file_name().and_then(|f| f.to_str()).expect("a cubin path names a file");
    let copy = dir.join(file);
    // `<name>.<kind>.<arch>.<hash>.cubin`: what comes before the hash.
    let stem_len = file.rsplitn(3, '.').nth(2).map_or(0, |s| s.len() + 1);
    remove_other_versions(dir, &file[..stem_len], &copy);
    if copy != cubin && !copy.is_file() {
        // Under another name first, as `CudaKey::compile` writes: a copy never looks done half written.
        let partial = copy.with_extension(format!("copy{}", std::process::id()));
        fs::copy(cubin, &partial).unwrap_or_else(|e| fail(&format!("copy {}: {e}", cubin.display())));
        fs::rename(&partial, &copy).unwrap_or_else(|e| fail(&format!("rename {}: {e}", partial.display())));
    }
    copy
}

/// `(name, path)` of every `<dir>/*.cu`, sorted by name (none when the directory does not exist).
fn cuda_sources(dir: &Path) -> Vec<(String, PathBuf)> {
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    let mut out = Vec::new();
    for entry in entries {
        let path = entry.unwrap_or_else(|e| fail(&format!("cannot read {}: {e}", dir.display()))).path();
        if path.extension().and_then(|e| e.to_str()) != Some("cu") {
            continue;
        }
        let name = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default().to_string();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            fail(&format!("{}: a module name is ASCII letters, digits and '_'", path.display()));
        }
        out.push((name, path));
    }
    out.sort();
    out
}

/// What every CUDA cubin's cache key shares: the compiler, its version, and the headers a source may
/// include.
struct CudaKey {
    nvcc: PathBuf,
    include: PathBuf,
    /// `-isystem` for the wheel's CCCL headers, when nvcc sits in a wheel that has them.
    cccl: Option<PathBuf>,
    hash: u64,
}

impl CudaKey {
    fn new(nvcc: &Path, include: &Path) -> CudaKey {
        let version = Command::new(nvcc)
            .arg("--version")
            .output()
            .map(|o| o.stdout)
            .unwrap_or_else(|e| fail(&format!("cannot run {}: {e}", nvcc.display())));
        let cccl = nvcc.parent().and_then(Path::parent).map(|top| top.join("include/cccl")).filter(|d| d.is_dir());
        let mut h = DefaultHasher::new();
        nvcc.hash(&mut h);
        version.hash(&mut h);
        cccl.hash(&mut h);
        let mut headers = Vec::new();
        collect_headers(include, &mut headers);
        headers.sort();
        for header in headers {
            header.hash(&mut h);
            fs::read(&header).unwrap_or_else(|e| fail(&format!("read {}: {e}", header.display()))).hash(&mut h);
        }
        CudaKey { nvcc: nvcc.to_owned(), include: include.to_owned(), cccl, hash: h.finish() }
    }

    /// The flags for one source.
    fn flags(&self, relocatable: bool) -> Vec<String> {
        let mut f = vec!["-cubin".into(), format!("-arch={CUDA_ARCH}"), "-O3".into(), "-std=c++17".into()];
        if relocatable {
            f.push("-rdc=true".into());
            f.push(format!("-maxrregcount={LIBRARY_MAX_REGISTERS}"));
        }
        f.push(format!("-I{}", self.include.display()));
        if let Some(cccl) = &self.cccl {
            f.push("-isystem".into());
            f.push(cccl.display().to_string());
        }
        f
    }

    /// The cubin of `source` in `cache`, compiled now only when no cubin of the same key is there. Fails
    /// the build with nvcc's message when nvcc refuses the source.
    fn compile(&self, source: &Path, cache: &Path, name: &str, relocatable: bool) -> PathBuf {
        let flags = self.flags(relocatable);
        let text = fs::read(source).unwrap_or_else(|e| fail(&format!("read {}: {e}", source.display())));
        let mut h = DefaultHasher::new();
        self.hash.hash(&mut h);
        flags.hash(&mut h);
        text.hash(&mut h);
        let kind = if relocatable { "lib" } else { "module" };
        let stem = format!("{name}.{kind}.{CUDA_ARCH}.");
        let cubin = cache.join(format!("{stem}{:016x}.cubin", h.finish()));
        remove_other_versions(cache, &stem, &cubin);
        if cubin.is_file() {
            return cubin;
        }
        // Written under another name first, so an interrupted build never leaves a cubin that looks done;
        // the process's own name, since builds of other profiles may compile the same source at once.
        let partial = cubin.with_extension(format!("partial{}", std::process::id()));
        let output = Command::new(&self.nvcc)
            .args(&flags)
            .arg("-o")
            .arg(&partial)
            .arg(source)
            .output()
            .unwrap_or_else(|e| fail(&format!("cannot run {}: {e}", self.nvcc.display())));
        if !output.status.success() {
            fail(&format!(
                "{} {} {} failed ({}):\n{}{}",
                self.nvcc.display(),
                flags.join(" "),
                source.display(),
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        fs::rename(&partial, &cubin).unwrap_or_else(|e| fail(&format!("rename {}: {e}", partial.display())));
        cubin
    }
}

/// Every `*.cuh` / `*.h` under `dir`.
fn collect_headers(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_headers(&path, out);
        } else if matches!(path.extension().and_then(|e| e.to_str()), Some("cuh" | "h")) {
            out.push(path);
        }
    }
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

/// The `tool` (ptxas, nvcc) `finder` (tools/find_cuda_tool.sh) finds, or why there is none.
fn find_tool(finder: &Path, tool: &str) -> Result<PathBuf, String> {
    let out = Command::new("bash")
        .arg(finder)
        .arg(tool)
        .output()
        .map_err(|e| format!("{tool} not found: cannot run bash {}: {e}", finder.display()))?;
    let path = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if out.status.success() && !path.is_empty() {
        return Ok(PathBuf::from(path));
    }
    // A tool installed later (the pip wheels after a first build) changes no file cargo watches and often
    // not PATH: a path that never exists makes cargo run this script again at every build until the tool
    // is found, so the kernels are built then instead of staying "not built" from the cached run.
    println!("cargo:rerun-if-changed={}", finder.with_file_name(format!(".{tool}-not-found-yet")).display());
    let why = String::from_utf8_lossy(&out.stderr).trim().to_owned();
    Err(if why.is_empty() {
        format!("{tool} not found: {} {tool} failed ({})", finder.display(), out.status)
    } else {
        why
    })
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

/// What the build made of one source: (name, source path, cubin path).
type Built = (String, PathBuf, PathBuf);

/// The text of `cubins.rs`.
fn generate(ptxas: &Result<PathBuf, String>, cubins: &[Built]) -> String {
    let mut s = String::new();
    write_tool(&mut s, "PTXAS", "ptxas that built the cubins", ptxas);
    write_cubins(&mut s, &format!("kernel in kernels/, for {ARCH}"), "cubin", cubins, ptxas);
    write_names(&mut s, "KERNEL_NAMES", cubins);
    write_sources(&mut s, "PTX source of each kernel (for the typed-kernel macro and docs)", "ptx", cubins);
    s
}

/// The CUDA part of `cubins.rs`.
fn generate_cuda(nvcc: &Result<PathBuf, String>, modules: &[Built], libraries: &[Built]) -> String {
    let mut s = String::new();
    write_tool(&mut s, "NVCC", "nvcc that built the CUDA modules", nvcc);
    write_cubins(&mut s, &format!("module in kernels/cuda/, for {CUDA_ARCH}"), "cuda_cubin", modules, nvcc);
    write_cubins(&mut s, &format!("library in kernels/cuda/lib/, for {CUDA_ARCH}"), "library_cubin", libraries, nvcc);
    write_names(&mut s, "CUDA_MODULE_NAMES", modules);
    write_sources(&mut s, "CUDA C++ source of each module", "cuda_source", modules);
    s
}

/// `const <name>: Result<&str, &str>`: the `what` used, or why there is none.
fn write_tool(s: &mut String, name: &str, what: &str, tool: &Result<PathBuf, String>) {
    writeln!(s, "/// Name of the {what}, or why there is none.").unwrap();
    match tool {
        Ok(path) => writeln!(s, "pub(crate) const {name}: Result<&str, &str> = Ok({:?});", path.display().to_string()),
        Err(why) => writeln!(s, "pub(crate) const {name}: Result<&str, &str> = Err({why:?});"),
    }
    .unwrap();
}

/// `fn <function>(name) -> Result<&'static [u8], &'static str>`: the cubin of each of `list` (a `what`),
/// or why the tool made none.
fn write_cubins(s: &mut String, what: &str, function: &str, list: &[Built], tool: &Result<PathBuf, String>) {
    writeln!(s, "/// The cubin of each {what}.").unwrap();
    writeln!(s, "pub(crate) fn {function}(name: &str) -> Result<&'static [u8], &'static str> {{\n    match name {{")
        .unwrap();
    for (name, _, cubin) in list {
        match tool {
            Ok(_) => writeln!(s, "        {name:?} => Ok(include_bytes!({:?})),", cubin.display().to_string()),
            Err(why) => writeln!(s, "        {name:?} => Err({why:?}),"),
        }
        .unwrap();
    }
    let kind = what.split(',').next().unwrap_or(what);
    writeln!(s, "        _ => Err(\"no {kind} of that name\"),\n    }}\n}}").unwrap();
}

/// `const <name>: &[&str]`: the names of `list`, sorted.
fn write_names(s: &mut String, name: &str, list: &[Built]) {
    let names: Vec<String> = list.iter().map(|(n, ..)| format!("{n:?}")).collect();
    writeln!(s, "pub(crate) const {name}: &[&str] = &[{}];", names.join(", ")).unwrap();
}

/// `fn <function>(name) -> Option<&'static str>`: the source text of each of `list`.
fn write_sources(s: &mut String, doc: &str, function: &str, list: &[Built]) {
    writeln!(s, "/// {doc}.").unwrap();
    writeln!(s, "pub(crate) fn {function}(name: &str) -> Option<&'static str> {{\n    match name {{").unwrap();
    for (name, source, _) in list {
        writeln!(s, "        {name:?} => Some(include_str!({:?})),", source.display().to_string()).unwrap();
    }
    s.push_str("        _ => None,\n    }\n}\n");
}
