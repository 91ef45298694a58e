//! From a cubin to a code image and a launch template, through the nvidia backend's cubin parser.
//!
//! On the simulator the same cubin is parsed (so a bad or foreign cubin is refused there too, and the
//! kernel's own parameter table is what launches are checked against); the code written is the
//! simulator's code image naming the entry, which runs the host reference of that kernel.

use omega_hal::arch::{self, Arch};
use omega_hal::cubin::{ConstBank, Module};

use crate::error::{Error, Result};
use crate::session::{runtime, KernelMeta, ParamInfo};

/// What goes into the code buffer.
enum Image {
    /// Machine code, relocated for its load address.
    Cubin(Module),
    /// The same bytes wherever it lands (the simulator's code image).
    Fixed(Vec<u8>),
}

/// A kernel ready to be placed at an address.
pub(crate) struct Prepared {
    image: Image,
    /// Bytes to allocate for the code buffer.
    pub(crate) image_bytes: usize,
    /// Offset of the entry's first instruction in the image.
    pub(crate) entry_offset: u64,
    /// What every launch of the entry needs, but its constant banks (see [`Prepared::meta_at`]).
    meta: KernelMeta,
    /// The entry's constant banks other than 0, as offsets in the image.
    banks: Vec<ConstBank>,
}

impl Prepared {
    /// What every launch of the entry needs once the image lies at `va`: its constant banks are the
    /// image's own bytes (relocated, GPU-readable in the code buffer), at `va` plus their offsets.
    pub(crate) fn meta_at(&self, va: u64) -> KernelMeta {
        let const_banks = self
            .banks
            .iter()
            .map(|b| omega_hal::ConstBank { index: b.index, va: va + b.offset, bytes: b.bytes })
            .collect();
        KernelMeta { const_banks, ..self.meta.clone() }
    }

    /// The bytes to write at the code buffer's start for a load at `va`, relocations applied.
    pub(crate) fn relocate(&self, va: u64) -> Result<Vec<u8>> {
        match &self.image {
            Image::Fixed(bytes) => Ok(bytes.clone()),
            Image::Cubin(m) => m.relocate(va).map_err(|e| Error::Load(format!("kernel `{}`: {e}", self.meta.name))),
        }
    }
}

/// The architecture of the open device (the simulator models sm_90).
fn device_arch() -> Result<&'static Arch> {
    let info = runtime().device_info().ok_or(Error::NotOpen("load"))?;
    arch::for_sm(info.arch_major, info.arch_minor).ok_or_else(|| {
        Error::Load(format!("no architecture entry for sm_{}{} ({})", info.arch_major, info.arch_minor, info.name))
    })
}

/// Parses `cubin` for the open device and picks `entry`.
pub(crate) fn prepare(cubin: &[u8], entry: &str) -> Result<Prepared> {
    let arch = device_arch()?;
    let module = Module::parse(cubin, arch).map_err(|e| Error::Load(format!("kernel `{entry}`: {e}")))?;
    let k = module.kernel(entry).map_err(|e| Error::Load(e.to_string()))?;
    if k.param_base != arch.param_base {
        return Err(Error::Load(format!(
            "kernel `{entry}`: parameters at constant-bank offset {:#x}, {} expects {:#x}",
            k.param_base, arch.name, arch.param_base
        )));
    }
    let meta = KernelMeta {
        name: k.name.clone(),
        code_bytes: k.code_bytes,
        registers: k.registers,
        static_shared_bytes: k.shared_bytes,
        local_bytes_per_thread: k.local_bytes_per_thread,
        barriers: k.barriers,
        params: k.params.iter().map(|p| ParamInfo { ordinal: p.ordinal, offset: p.offset, size: p.size }).collect(),
        param_bytes: k.param_bytes,
        max_threads: k.max_threads,
        const_banks: Vec::new(),
    };
    if runtime().installed()?.platform.code_format() == omega_hal::CodeFormat::SimImage {
        // The simulator's kernel is a host function holding its module data itself: no banks to bind, and
        // the code the buffer holds is the code image, not the cubin's machine code.
        let img = omega_hal::sim::code_image(entry);
        return Ok(Prepared {
            image_bytes: img.len(),
            entry_offset: 0,
            meta: KernelMeta { code_bytes: img.len() as u64, ..meta },
            banks: Vec::new(),
            image: Image::Fixed(img),
        });
    }
    let (image_bytes, entry_offset, banks) = (module.alloc_bytes() as usize, k.code_offset, k.const_banks.clone());
    Ok(Prepared { image: Image::Cubin(module), image_bytes, entry_offset, meta, banks })
}

/// Prepares repository kernel `name` (`kernels/<name>.ptx`): its cubin, or — on the simulator in a build
/// without ptxas — its host reference, described by the repository's host spec.
pub(crate) fn prepare_named(name: &str) -> Result<Prepared> {
    let cubin = crate::kernels::sm90_cubin(name);
    let sim = runtime().installed()?.platform.code_format() == omega_hal::CodeFormat::SimImage;
    match cubin {
        Ok(c) => prepare(c, name),
        Err(_) if sim => {
            let spec = crate::kernels::host_spec(name)
                .ok_or_else(|| Error::Load(format!("no kernel `{name}` in kernels/")))?;
            let img = omega_hal::sim::code_image(name);
            let params = spec.params();
            let meta = KernelMeta {
                name: name.to_owned(),
                code_bytes: img.len() as u64,
                registers: 32,
                static_shared_bytes: spec.static_shared_bytes,
                local_bytes_per_thread: spec.local_bytes_per_thread,
                barriers: 0,
                param_bytes: params.last().map(|p| p.offset + p.size).unwrap_or(0),
                params,
                max_threads: None,
                const_banks: Vec::new(),
            };
            Ok(Prepared { image_bytes: img.len(), entry_offset: 0, meta, banks: Vec::new(), image: Image::Fixed(img) })
        }
        Err(why) => Err(Error::Load(format!("kernel `{name}`: {why}"))),
    }
}
