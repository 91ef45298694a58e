//! Loaded modules and kernels: the code and data buffers, the entry addresses and what every launch of a
//! kernel needs.
//!
//! A [`Module`] is a cubin made resident ([`Scope::load_module`]): its code and constant banks in a code
//! buffer, its `__device__` data in a data buffer, both relocated, so every kernel taken from it
//! ([`Module::kernel`]) shares the module's data as CUDA's kernels of one module do. A [`Kernel`] keeps
//! its module's buffers alive. A module can outlive its scope as a [`KeptModule`](crate::KeptModule)
//! (`src/api/kept.rs`), for as long as the device stays open.

use core::marker::PhantomData;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use crate::error::{Error, Result, Stage};
use crate::loader::{CubinModule, Placement, PreparedModule, Segment};
use crate::mem::Mem;
use crate::scope::Scope;
use crate::session::{runtime, KernelMeta, ParamInfo};
use crate::state::{Code, Data};

/// The buffers of a resident module. They are held as `'static` buffers because a module may be kept
/// beyond its scope (`KeptModule`); what binds them to a scope is the brand of the [`Module`] or
/// [`Kernel`] that reaches them, and a kept module hands them out again only inside a scope of the same
/// open device.
pub(crate) struct Resident {
    code: Mem<'static, Code>,
    /// `__device__` data (none when the module has none).
    data: Option<RefCell<Mem<'static, Data<u8>>>>,
    /// The parsed module and what Omega provides it (none for a simulator host kernel).
    prepared: Option<PreparedModule>,
    /// Entry offset of each of the module's kernels in the code buffer.
    entries: Vec<u64>,
    /// The device printf formatter's copy of the data image, while the module lives.
    printf_source: Option<u64>,
    /// The kernels taken so far, by name: entry address and launch template (registered once, so a
    /// second `Module::kernel` of the same name costs a lookup).
    kernels: RefCell<HashMap<String, (u64, KernelMeta)>>,
}

impl Drop for Resident {
    fn drop(&mut self) {
        if let Some(id) = self.printf_source {
            crate::printf::release_source(id);
        }
    }
}

impl Resident {
    /// The module's code buffer (its handle and address say whether it is still live).
    pub(crate) fn code(&self) -> &Mem<'static, Code> {
        &self.code
    }

    fn placement(&self) -> Placement {
        Placement { code_va: self.code.va(), data_va: self.data.as_ref().map_or(0, |d| d.borrow().va()) }
    }
}

/// A cubin resident in the session of scope `'s`: take its kernels with [`Module::kernel`].
pub struct Module<'s> {
    resident: Rc<Resident>,
    // Invariant in 's, like the scope's own brand.
    _scope: PhantomData<fn(&'s ()) -> &'s ()>,
}

impl core::fmt::Debug for Module<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Module")
            .field("code_va", &self.resident.code.va())
            .field("kernels", &self.kernel_names())
            .finish()
    }
}

impl<'s> Module<'s> {
    pub(crate) fn load(scope: &'s Scope<'s>, cubin: &[u8]) -> Result<Self> {
        let prepared = PreparedModule::new(cubin)?;
        let mut code = scope.alloc_code(prepared.code_bytes())?.into_static();
        let mut data = match prepared.data_bytes() {
            0 => None,
            n => Some(scope.alloc::<u8>(n)?.into_static()),
        };
        let at = Placement { code_va: code.va(), data_va: data.as_ref().map_or(0, Mem::va) };
        let (code_image, data_image, entries) = prepared.images(at)?;
        code.write_code(&code_image)?;
        if let Some(d) = &mut data {
            d.write(&data_image)?;
        }
        let printf_source = (prepared.module.undefined.iter().any(|s| s == crate::printf::VPRINTF)
            && !data_image.is_empty())
        .then(|| crate::printf::register_source(at.data_va, data_image));
        let resident = Resident {
            code,
            data: data.map(RefCell::new),
            prepared: Some(prepared),
            entries,
            printf_source,
            kernels: RefCell::new(HashMap::new()),
        };
        Ok(Module { resident: Rc::new(resident), _scope: PhantomData })
    }

    /// The module's buffers, shared (what a kept module holds).
    pub(crate) fn resident(&self) -> &Rc<Resident> {
        &self.resident
    }

    /// The module whose buffers are `resident`, in scope `'s`. The caller (a kept module) has checked that
    /// they belong to the device that is open in this scope.
    pub(crate) fn from_resident(resident: Rc<Resident>) -> Self {
        Module { resident, _scope: PhantomData }
    }

    /// The kernel called `name` (its symbol name: the mangled name of a C++ kernel that is not
    /// `extern "C"`, such as a template instance). Refused, naming the cause, when the module has no such
    /// kernel, or the kernel needs a symbol the module does not define and Omega does not provide, or a
    /// launch feature the platform lacks.
    pub fn kernel(&self, name: &str) -> Result<Kernel<'s>> {
        let r = &self.resident;
        if let Some((entry_va, meta)) = r.kernels.borrow().get(name) {
            return Ok(Kernel { resident: r.clone(), entry_va: *entry_va, meta: meta.clone(), _scope: PhantomData });
        }
        let prepared = r.prepared.as_ref().expect("a module loaded from a cubin");
        let found = prepared.module.kernels.iter().position(|k| k.name == name);
        let Some(index) = found else {
            let e = prepared.module.kernel(name).expect_err("not among the kernels");
            return Err(Error::Load(e.into()));
        };
        let meta = prepared.kernel_meta(&prepared.module.kernels[index], r.placement())?;
        let entry_va = r.code.va() + r.entries[index];
        runtime().register_kernel(entry_va, meta.clone())?;
        r.kernels.borrow_mut().insert(name.to_string(), (entry_va, meta.clone()));
        Ok(Kernel { resident: r.clone(), entry_va, meta, _scope: PhantomData })
    }

    /// The names of its kernels (symbol names), in the cubin's order.
    pub fn kernel_names(&self) -> Vec<&str> {
        self.resident
            .prepared
            .as_ref()
            .map_or(Vec::new(), |p| p.module.kernels.iter().map(|k| k.name.as_str()).collect())
    }

    /// The parsed cubin: every kernel's attributes, the module's data symbols, undefined symbols and
    /// `.nv.compat` records.
    pub fn info(&self) -> &CubinModule {
        &self.resident.prepared.as_ref().expect("a module loaded from a cubin").module
    }

    /// The GPU address of the module's data object `name` (`__device__` or `__constant__`).
    pub fn symbol_va(&self, name: &str) -> Option<u64> {
        let s = self.info().symbol(name)?;
        let at = self.resident.placement();
        Some(match s.segment {
            Segment::Code => at.code_va + s.offset,
            Segment::Data => at.data_va + s.offset,
        })
    }

    /// The `__device__` object `name` and the data buffer holding it, or why there is none.
    fn device_object(&self, name: &str, len: usize) -> Result<(u64, &RefCell<Mem<'static, Data<u8>>>)> {
        let refuse = |why: crate::error::SettingError| Err(Error::Setting { stage: Stage::ModuleData, detail: why });
        let Some(s) = self.info().symbol(name) else {
            return refuse(crate::error::SettingError::NoDataObject(name.to_string()));
        };
        if s.segment != Segment::Data {
            return refuse(crate::error::SettingError::ConstantObject(name.to_string()));
        }
        if len as u64 > s.bytes {
            return refuse(crate::error::SettingError::ObjectTooShort { len, name: name.to_string(), bytes: s.bytes });
        }
        let data = self.resident.data.as_ref().expect("a module with data objects has a data buffer");
        Ok((s.offset, data))
    }

    /// Copies the first `out.len()` bytes of `__device__` object `name` from the device.
    pub fn read_global(&self, name: &str, out: &mut [u8]) -> Result<()> {
        let (offset, data) = self.device_object(name, out.len())?;
        let mut data = data.borrow_mut();
        let mut all = vec![0u8; offset as usize + out.len()];
        data.read(&mut all)?;
        out.copy_from_slice(&all[offset as usize..]);
        Ok(())
    }

    /// Writes `bytes` at the start of `__device__` object `name` and makes them visible to the device.
    pub fn write_global(&self, name: &str, bytes: &[u8]) -> Result<()> {
        let (offset, data) = self.device_object(name, bytes.len())?;
        let mut data = data.borrow_mut();
        let mut all = vec![0u8; offset as usize + bytes.len()];
        data.read(&mut all)?;
        all[offset as usize..].copy_from_slice(bytes);
        data.write(&all)
    }
}

/// A kernel resident in a code buffer of scope `'s`.
pub struct Kernel<'s> {
    resident: Rc<Resident>,
    entry_va: u64,
    meta: KernelMeta,
    // Invariant in 's, like the scope's own brand.
    _scope: PhantomData<fn(&'s ()) -> &'s ()>,
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

    /// CTAs of this kernel one SM holds at once with `threads` a CTA and `dynamic_shared` bytes of shared
    /// memory beyond its static part (at least 1): a grid of `sm_count` times this runs in one wave.
    pub fn resident_ctas(&self, threads: u32, dynamic_shared: u32) -> u32 {
        crate::core::session::resident_ctas(&self.meta, threads, dynamic_shared)
    }

    /// The parameter table the kernel declares.
    pub fn params(&self) -> &[ParamInfo] {
        &self.meta.params
    }

    /// The code buffer (shared with the other kernels of its module).
    pub fn code(&self) -> &Mem<'s, Code> {
        &self.resident.code
    }

    pub(crate) fn load_named(scope: &'s Scope<'s>, name: &str) -> Result<Self> {
        match crate::kernels::sm90_cubin(name) {
            Ok(cubin) => Module::load(scope, cubin)?.kernel(name),
            Err(why) => {
                let (image, meta) = crate::loader::host_spec_meta(name, why)?;
                Self::place_fixed(scope, &image, meta)
            }
        }
    }

    /// On the simulator: the host implementation registered with it under `name` (see
    /// [`crate::testing::Sim::register_kernel`]), declared with the parameter table `params`. It is how a
    /// kernel without a repository host spec runs on the simulator (tests, typed handles of new PTX).
    /// Refused with [`Error::Load`] on a GPU platform, or when no host implementation has that name.
    pub fn load_host(scope: &'s Scope<'s>, name: &str, params: &[ParamInfo]) -> Result<Self> {
        let (image, meta) = crate::loader::host_kernel(name, params)?;
        Self::place_fixed(scope, &image, meta)
    }

    pub(crate) fn load_cubin(scope: &'s Scope<'s>, cubin: &[u8], entry: &str) -> Result<Self> {
        Module::load(scope, cubin)?.kernel(entry)
    }

    /// A code buffer holding `image` (a simulator code image), its entry at the start.
    fn place_fixed(scope: &'s Scope<'s>, image: &[u8], meta: KernelMeta) -> Result<Self> {
        let mut code = scope.alloc_code(image.len())?.into_static();
        code.write_code(image)?;
        let entry_va = code.va();
        runtime().register_kernel(entry_va, meta.clone())?;
        let resident = Resident {
            code,
            data: None,
            prepared: None,
            entries: vec![0],
            printf_source: None,
            kernels: RefCell::new(HashMap::new()),
        };
        Ok(Kernel { resident: Rc::new(resident), entry_va, meta, _scope: PhantomData })
    }
}
