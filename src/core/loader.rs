//! From a cubin to resident images and launch templates, through the cubin parser of `omega-hal`.
//!
//! A module is placed in two buffers: its code and constant banks in a code buffer (GPU-executable,
//! never GPU-written), its `__device__` data in a data buffer (GPU-writable; zeroed `.nv.global`,
//! initialised `.nv.global.init`). Relocations are applied for both addresses, and a symbol the module
//! leaves undefined is resolved when Omega provides it — `vprintf`, Omega's device printf — or left
//! unpatched: the module loads, and only a kernel that needs such a symbol is refused, at its own load,
//! naming it. A kernel is refused the same way when it declares what the launch path cannot do yet (a
//! cluster shape).
//!
//! On the simulator the same cubin is parsed (so a bad or foreign cubin is refused there too, and the
//! kernel's own parameter table is what launches are checked against); the code written is one
//! simulator code image per kernel, naming the entry (the host reference runs) and carrying the addresses
//! its machine code would have had: the module's `__device__` data in the data buffer, and the printf
//! buffer for a kernel that calls `vprintf`.

use omega_hal::arch::{self, Arch};
use omega_hal::cubin::{CubinError, ExternalFunction, KernelInfo, Module, ModuleConstBank};

use crate::error::{Error, LoadError, Result, Stage};
use crate::kernels::HostSpec;
use crate::platform::Installed;
use crate::printf::{self, VPRINTF};
use crate::session::{runtime, KernelMeta, ParamInfo};

/// The parsed cubin a loaded module hands out ([`crate::Module::info`]), and which buffer a symbol of it
/// lies in.
pub use omega_hal::cubin::{Module as CubinModule, Segment};

/// What a simulator launch template claims of registers. A host kernel runs on the CPU and uses none; the
/// template says what an ordinary small kernel would, so that the launch checks (registers times threads
/// against the SM's register file) treat it as one.
const SIM_REGISTERS: u32 = 32;

/// On the simulator: the code image naming host kernel `name` and the launch template the session checks
/// its launches against, from the kernel's parameter table and its static needs.
fn sim_kernel(
    name: &str,
    params: Vec<ParamInfo>,
    static_shared_bytes: u32,
    local_bytes_per_thread: u32,
) -> (Vec<u8>, KernelMeta) {
    let image = omega_hal::sim::code_image(name);
    let meta = KernelMeta {
        name: name.to_owned(),
        code_bytes: image.len() as u64,
        registers: SIM_REGISTERS,
        static_shared_bytes,
        local_bytes_per_thread,
        param_bytes: params.iter().map(|p| p.offset + p.size).max().unwrap_or(0),
        params,
        ..KernelMeta::default()
    };
    (image, meta)
}

/// On the simulator: repository kernel `spec`'s code image and launch template.
pub(crate) fn sim_spec_kernel(installed: &Installed, spec: &HostSpec) -> (Vec<u8>, KernelMeta) {
    register_reference(installed, spec.name);
    sim_kernel(spec.name, spec.params(), spec.static_shared_bytes, spec.local_bytes_per_thread)
}

/// On the simulator: the host implementation registered with it under `name`, declared with the parameter
/// table `params` ([`crate::Kernel::load_host`]). Refused with [`Error::Load`] on a GPU platform, or when
/// no host implementation has that name.
pub(crate) fn host_kernel(name: &str, params: &[ParamInfo]) -> Result<(Vec<u8>, KernelMeta)> {
    let installed = runtime().installed()?;
    let refuse = |why: LoadError| Err(Error::Load(why.for_kernel(name)));
    let Some(sim) = installed.sim else {
        return refuse(LoadError::HostKernelOffSimulator { platform: installed.platform.name() });
    };
    if !sim.has_kernel(name) {
        return refuse(LoadError::NoHostImplementation);
    }
    Ok(sim_kernel(name, params.to_vec(), 0, 0))
}

/// On the simulator behind `installed`: makes it run repository kernel `name`, when there is one of that
/// name, by registering its host reference. The simulators the core installs start with no host kernel
/// (the demo kernels are not wired into the platform); loading a kernel is what brings its reference in.
fn register_reference(installed: &Installed, name: &str) {
    if let (Some(sim), Some(spec)) = (installed.sim.as_ref(), crate::kernels::host_reference(name)) {
        if !sim.has_kernel(name) {
            crate::kernels::register_host_kernel(sim, spec);
        }
    }
}

/// The architecture of the open device (the simulator models sm_90).
pub(crate) fn device_arch() -> Result<&'static Arch> {
    let info = runtime().device_info().ok_or(Error::NotOpen(Stage::Load))?;
    arch::for_sm(info.arch_major, info.arch_minor).ok_or_else(|| {
        Error::Load(LoadError::NoArchitecture {
            major: info.arch_major,
            minor: info.arch_minor,
            device: info.name.to_string(),
        })
    })
}

/// A cubin parsed for the open device, with what Omega provides for its undefined symbols.
pub(crate) struct PreparedModule {
    pub(crate) module: Module,
    arch: &'static Arch,
    sim: bool,
    /// Device printf, when the module calls `vprintf` and it could be made ready.
    printf: Option<printf::Ready>,
    /// Why device printf is not ready, when the module calls `vprintf` and it is not.
    printf_missing: Option<Error>,
}

/// Where the buffers of a placed module are.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Placement {
    pub(crate) code_va: u64,
    pub(crate) data_va: u64,
}

/// Alignment of each simulator code image inside a module's code buffer.
const SIM_IMAGE_ALIGN: usize = 128;

impl PreparedModule {
    /// Parses `cubin` for the open device; makes device printf ready when the module calls `vprintf`.
    pub(crate) fn new(cubin: &[u8]) -> Result<PreparedModule> {
        let arch = device_arch()?;
        let module = Module::parse(cubin, arch).map_err(LoadError::from)?;
        // The platform says which code it runs: the simulator's code images, or the cubin's machine code.
        let installed = runtime().installed()?;
        let sim = installed.platform.code_format() == omega_hal::CodeFormat::SimImage;
        if sim {
            for k in &module.kernels {
                register_reference(&installed, &k.name);
            }
        }
        let (mut printf, mut printf_missing) = (None, None);
        if module.undefined.iter().any(|s| s == VPRINTF) {
            match printf::ready(sim) {
                Ok(r) => printf = Some(r),
                Err(e) => printf_missing = Some(e),
            }
        }
        Ok(PreparedModule { module, arch, sim, printf, printf_missing })
    }

    /// Bytes of the code buffer.
    pub(crate) fn code_bytes(&self) -> usize {
        if self.sim {
            self.sim_images(Placement { code_va: 0, data_va: 0 }).0.len().max(1)
        } else {
            self.module.alloc_bytes() as usize
        }
    }

    /// Bytes of the data buffer (0: the module has no `__device__` data).
    pub(crate) fn data_bytes(&self) -> usize {
        self.module.data.len()
    }

    /// The address Omega gives undefined symbol `symbol`, if it provides it.
    fn resolve(&self, symbol: &str) -> Option<u64> {
        (symbol == VPRINTF).then_some(self.printf.map(|p| p.vprintf_va)).flatten()
    }

    /// What Omega's definition of undefined symbol `symbol` needs of a launch, if it provides it.
    fn external(&self, symbol: &str) -> Option<ExternalFunction> {
        (symbol == VPRINTF).then_some(self.printf.map(|p| p.needs)).flatten()
    }

    /// The bytes of both buffers for `at`: (code, data), and each kernel's entry offset in the code.
    pub(crate) fn images(&self, at: Placement) -> Result<(Vec<u8>, Vec<u8>, Vec<u64>)> {
        let relocated = self.module.relocate(at.code_va, at.data_va, &|s| self.resolve(s)).map_err(LoadError::from)?;
        if self.sim {
            let (code, entries) = self.sim_images(at);
            return Ok((code, relocated.data, entries));
        }
        let entries = self.module.kernels.iter().map(|k| k.code_offset).collect();
        Ok((relocated.image, relocated.data, entries))
    }

    /// On the simulator: one code image per kernel, each at a multiple of [`SIM_IMAGE_ALIGN`].
    fn sim_images(&self, at: Placement) -> (Vec<u8>, Vec<u64>) {
        let (mut code, mut entries) = (Vec::new(), Vec::new());
        for k in &self.module.kernels {
            code.resize(code.len().next_multiple_of(SIM_IMAGE_ALIGN), 0);
            entries.push(code.len() as u64);
            code.extend_from_slice(&self.sim_image(k, at));
        }
        (code, entries)
    }

    /// On the simulator: kernel `k`'s code image, naming it and carrying the addresses its host reference
    /// reads (the module's `__device__` data, and the printf buffer when it calls `vprintf`).
    fn sim_image(&self, k: &KernelInfo, at: Placement) -> Vec<u8> {
        let mut symbols: Vec<(&str, u64)> = self
            .module
            .symbols
            .iter()
            .filter(|s| s.segment == Segment::Data)
            .map(|s| (s.name.as_str(), at.data_va + s.offset))
            .collect();
        if let Some(p) = self.printf.filter(|_| k.externs.iter().any(|s| s == VPRINTF)) {
            symbols.push((printf::SIM_BUFFER_SYMBOL, p.buffer_va));
        }
        omega_hal::sim::code_image_with_symbols(&k.name, &symbols)
    }

    /// What every launch of kernel `k` needs, for a module placed at `at`; refused when `k` needs a
    /// symbol nothing provides or a launch feature the platform lacks.
    pub(crate) fn kernel_meta(&self, k: &KernelInfo, at: Placement) -> Result<KernelMeta> {
        let refuse = |why: LoadError| Err(Error::Load(why.for_kernel(&k.name)));
        // An explicit cluster without its shape (`CTA_PER_CLUSTER`) is CUDA's launch-time cluster, which
        // the Rust launch sets; one with it runs in that shape (`KernelMeta::cluster`).
        if k.explicit_cluster && k.cluster_dims.is_none() {
            return refuse(LoadError::ClusterShapeMissing);
        }
        if k.param_base != self.arch.param_base {
            return refuse(LoadError::ParamBase {
                found: k.param_base,
                arch: self.arch.name,
                expected: self.arch.param_base,
            });
        }
        let linked = match self.module.link(k, self.arch, &|s| self.external(s)) {
            Ok(l) => l,
            Err(CubinError::UnresolvedSymbol { symbol, .. }) => {
                let why = match (&symbol[..], &self.printf_missing) {
                    (VPRINTF, Some(missing)) => LoadError::PrintfUnavailable { missing: Box::new(missing.clone()) },
                    _ => LoadError::UndefinedSymbol { symbol },
                };
                return refuse(why);
            }
            Err(e) => return refuse(e.into()),
        };
        let const_banks = if self.sim {
            // The simulator's kernel is a host function holding its constant data itself.
            Vec::new()
        } else {
            k.const_banks
                .iter()
                .map(|b: &ModuleConstBank| omega_hal::ConstBank {
                    index: b.index,
                    va: at.code_va + b.offset,
                    bytes: b.bytes,
                })
                .collect()
        };
        // What the GPU fetches from the entry on: the machine code, or on the simulator the code image.
        let code_bytes = if self.sim { self.sim_image(k, at).len() as u64 } else { k.code_bytes };
        Ok(KernelMeta {
            name: k.name.clone(),
            code_bytes,
            registers: linked.registers,
            static_shared_bytes: k.shared_bytes,
            local_bytes_per_thread: linked.local_bytes_per_thread,
            barriers: k.barriers,
            params: k.params.iter().map(|p| ParamInfo { ordinal: p.ordinal, offset: p.offset, size: p.size }).collect(),
            param_bytes: k.param_bytes,
            max_threads: k.max_threads,
            const_banks,
            printf: k.externs.iter().any(|s| s == VPRINTF),
            cluster: k.cluster_dims.filter(|_| k.explicit_cluster),
        })
    }
}

/// What goes into the code buffer of a single-buffer load.
enum Image {
    /// A module, its data image placed right after its code image.
    Cubin(Box<PreparedModule>),
    /// The same bytes wherever it lands (the simulator's code image).
    Fixed(Vec<u8>),
}

/// One kernel of a cubin ready to be placed in a single code buffer at an address (the C layer's and
/// the job engine's loads). The module's `__device__` data then lies in the code buffer after the code,
/// which the GPU may read but not write: the repository's PTX kernels only read theirs. Kernels that
/// write module data or call undefined symbols load through [`crate::Scope::load_module`].
pub(crate) struct PreparedKernel {
    image: Image,
    /// Bytes to allocate for the code buffer.
    pub(crate) image_bytes: usize,
    /// Offset of the entry's first instruction in the image.
    pub(crate) entry_offset: u64,
    /// The entry's position among the module's kernels.
    entry: usize,
    /// What every launch of the entry needs, but its constant banks (see [`PreparedKernel::meta_at`]).
    meta: KernelMeta,
}

impl PreparedKernel {
    /// What every launch of the entry needs once the image lies at `va`: its constant banks are the
    /// image's own bytes (relocated, GPU-readable in the code buffer), at `va` plus their offsets.
    pub(crate) fn meta_at(&self, va: u64) -> KernelMeta {
        let Image::Cubin(m) = &self.image else { return self.meta.clone() };
        let k = &m.module.kernels[self.entry];
        let const_banks = if m.sim {
            Vec::new()
        } else {
            k.const_banks
                .iter()
                .map(|b| omega_hal::ConstBank { index: b.index, va: va + b.offset, bytes: b.bytes })
                .collect()
        };
        KernelMeta { const_banks, ..self.meta.clone() }
    }

    /// The bytes to write at the code buffer's start for a load at `va`, relocations applied.
    pub(crate) fn relocate(&self, va: u64) -> Result<Vec<u8>> {
        match &self.image {
            Image::Fixed(bytes) => Ok(bytes.clone()),
            Image::Cubin(m) => {
                m.module.relocate_in_one(va).map_err(|e| Error::Load(LoadError::from(e).for_kernel(&self.meta.name)))
            }
        }
    }
}

/// Parses `cubin` for the open device and picks `entry`, for a single-buffer load.
pub(crate) fn prepare(cubin: &[u8], entry: &str) -> Result<PreparedKernel> {
    // Only a refusal of the cubin itself names the kernel; "device not open" and the platform's own
    // errors keep their stage as they are.
    let m = PreparedModule::new(cubin).map_err(|e| match e {
        Error::Load(why) => Error::Load(why.for_kernel(entry)),
        other => other,
    })?;
    let index = m.module.kernels.iter().position(|k| k.name == entry);
    let Some(index) = index else {
        return Err(Error::Load(m.module.kernel(entry).expect_err("not among the kernels").into()));
    };
    let k = &m.module.kernels[index];
    if let Some(symbol) = k.externs.first() {
        return Err(Error::Load(LoadError::NeedsModuleLoad { kernel: entry.to_string(), symbol: symbol.clone() }));
    }
    let meta = m.kernel_meta(k, Placement { code_va: 0, data_va: 0 })?;
    if m.sim {
        // The code the buffer holds is the code image naming the entry, not the cubin's machine code.
        let img = omega_hal::sim::code_image(entry);
        let meta = KernelMeta { code_bytes: img.len() as u64, ..meta };
        return Ok(PreparedKernel {
            image_bytes: img.len(),
            entry_offset: 0,
            entry: index,
            meta,
            image: Image::Fixed(img),
        });
    }
    let image_bytes = m.module.alloc_bytes_in_one() as usize;
    let entry_offset = k.code_offset;
    Ok(PreparedKernel { image: Image::Cubin(Box::new(m)), image_bytes, entry_offset, entry: index, meta })
}

/// Prepares repository kernel `name` (`kernels/<name>.ptx`) for a single-buffer load: its cubin, or — on
/// the simulator in a build without ptxas — its host reference, described by the repository's host spec.
pub(crate) fn prepare_named(name: &str) -> Result<PreparedKernel> {
    match crate::kernels::sm90_cubin(name) {
        Ok(c) => prepare(c, name),
        Err(why) => {
            let (img, meta) = host_spec_meta(name, why)?;
            Ok(PreparedKernel { image_bytes: img.len(), entry_offset: 0, entry: 0, meta, image: Image::Fixed(img) })
        }
    }
}

/// On the simulator in a build without ptxas: repository kernel `name`'s code image and launch template
/// from its host spec. Elsewhere `why` (there is no cubin) is the error.
pub(crate) fn host_spec_meta(name: &str, why: &'static str) -> Result<(Vec<u8>, KernelMeta)> {
    let installed = runtime().installed()?;
    if installed.platform.code_format() != omega_hal::CodeFormat::SimImage {
        return Err(Error::Load(LoadError::NotBuilt { kernel: name.to_string(), why }));
    }
    let spec = crate::kernels::host_spec(name)
        .ok_or_else(|| Error::Load(LoadError::NoSuchRepositoryKernel(name.to_string())))?;
    Ok(sim_spec_kernel(&installed, spec))
}
