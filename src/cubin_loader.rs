//! From a cubin to a code image and a launch template, through the nvidia backend's cubin parser.
//!
//! On the simulator the same cubin is parsed (so a bad or foreign cubin is refused there too, and the
//! kernel's own parameter table is what launches are checked against); the code written is the
//! simulator's code image naming the entry, which runs the host reference of that kernel.

use omega_hal::nvidia::arch::{self, Arch};
use omega_hal::nvidia::cubin::Module;

use crate::error::{Error, Result};
use crate::session::{runtime, KernelMeta, ParamInfo};

/// A parsed cubin, ready to be placed at an address.
pub(crate) struct Prepared {
    module: Module,
    /// Bytes to allocate for the code buffer.
    pub(crate) image_bytes: usize,
    /// Offset of the entry's first instruction in the image.
    pub(crate) entry_offset: u64,
    /// What every launch of the entry needs.
    pub(crate) meta: KernelMeta,
    /// On the simulator: the code image to write instead of the machine code.
    sim_image: Option<Vec<u8>>,
}

impl Prepared {
    /// The bytes to write at the code buffer's start for a load at `va`, relocations applied.
    pub(crate) fn relocate(&self, va: u64) -> Result<Vec<u8>> {
        if let Some(img) = &self.sim_image {
            return Ok(img.clone());
        }
        self.module.relocate(va).map_err(|e| Error::Load(format!("kernel `{}`: {e}", self.meta.name)))
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
    };
    let sim = runtime().installed()?.sim.is_some();
    let (image_bytes, entry_offset, sim_image) = if sim {
        let img = omega_hal::sim::code_image(entry);
        (img.len(), 0, Some(img))
    } else {
        (module.alloc_bytes() as usize, k.code_offset, None)
    };
    Ok(Prepared { module, image_bytes, entry_offset, meta, sim_image })
}
