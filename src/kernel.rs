//! Loaded kernels: the code buffer, the entry address and what every launch of the kernel needs.

use crate::error::{Error, Result};
use crate::mem::Mem;
use crate::scope::Scope;
use crate::session::{runtime, KernelMeta, ParamInfo};
use crate::state::Code;

/// A kernel resident in a code buffer of scope `'s`.
pub struct Kernel<'s> {
    code: Mem<'s, Code>,
    entry_va: u64,
    meta: KernelMeta,
}

impl core::fmt::Debug for Kernel<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Kernel").field("name", &self.meta.name).field("entry_va", &self.entry_va).finish()
    }
}

impl<'s> Kernel<'s> {
    /// Entry name.
    pub fn name(&self) -> &str {
        &self.meta.name
    }

    /// GPU address of the first instruction.
    pub fn entry_va(&self) -> u64 {
        self.entry_va
    }

    /// Registers, shared and local memory, and the parameter table.
    pub fn meta(&self) -> &KernelMeta {
        &self.meta
    }

    /// The parameter table the kernel declares.
    pub fn params(&self) -> &[ParamInfo] {
        &self.meta.params
    }

    /// The code buffer.
    pub fn code(&self) -> &Mem<'s, Code> {
        &self.code
    }

    pub(crate) fn load_named(scope: &'s Scope<'s>, name: &str) -> Result<Self> {
        let prepared = crate::cubin_loader::prepare_named(name).or_else(|e| runtime().fail(e))?;
        Self::place(scope, prepared)
    }

    /// On the simulator: the host implementation registered with it under `name` (see
    /// [`omega_hal::sim::Sim::register_kernel`]), declared with the parameter table `params`. It is how a
    /// kernel without a repository host spec runs on the simulator (tests, typed handles of new PTX).
    /// Refused with [`Error::Load`] on a GPU platform, or when no host implementation has that name.
    pub fn load_host(scope: &'s Scope<'s>, name: &str, params: &[ParamInfo]) -> Result<Self> {
        let installed = runtime().installed()?;
        let fail = |why: String| {
            let e = Error::Load(format!("kernel `{name}`: {why}"));
            runtime().set_error(&e);
            Err(e)
        };
        let Some(sim) = installed.sim else {
            return fail(format!(
                "host kernels run on the simulator only, the platform is {}",
                installed.platform.name()
            ));
        };
        if !sim.has_kernel(name) {
            return fail("no host implementation is registered with the simulator under that name".into());
        }
        let image = omega_hal::sim::code_image(name);
        let mut code = scope.alloc_code(image.len())?;
        code.write_code(&image)?;
        let meta = KernelMeta {
            name: name.to_owned(),
            code_bytes: image.len() as u64,
            registers: 32,
            param_bytes: params.iter().map(|p| p.offset + p.size).max().unwrap_or(0),
            params: params.to_vec(),
            ..KernelMeta::default()
        };
        let entry_va = code.va();
        runtime().register_kernel(entry_va, meta.clone())?;
        Ok(Kernel { code, entry_va, meta })
    }

    pub(crate) fn load_cubin(scope: &'s Scope<'s>, cubin: &[u8], entry: &str) -> Result<Self> {
        let prepared = crate::cubin_loader::prepare(cubin, entry).or_else(|e| runtime().fail(e))?;
        Self::place(scope, prepared)
    }

    fn place(scope: &'s Scope<'s>, prepared: crate::cubin_loader::Prepared) -> Result<Self> {
        let mut code = scope.alloc_code(prepared.image_bytes)?;
        let image = prepared.relocate(code.va())?;
        code.write_code(&image)?;
        let entry_va = code.va() + prepared.entry_offset;
        let meta = prepared.meta_at(code.va());
        runtime().register_kernel(entry_va, meta.clone())?;
        Ok(Kernel { code, entry_va, meta })
    }
}
