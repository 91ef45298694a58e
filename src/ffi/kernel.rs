//! `omega_gpu_kernel.h`: loads one of the repository's kernels (`kernels/*.ptx`) into a code buffer, so a C
//! program can launch it with `omega_gpu_session_launch`.
//!
//! The kernel's sm_90 cubin is parsed and placed as the typed API's `Scope::load` places it: relocated
//! machine code on the GPU, the simulator's code image naming the host implementation on the simulator
//! (which, in a build without ptxas, is described from the repository's host spec instead). Either way the kernel's needs
//! (registers, shared and local memory, parameter table) are registered under its entry address, so a C
//! launch of it gets what the typed API's `Scope::load` would give it.

use core::ffi::{c_char, c_int};

use super::boundary::{c_str, null, status};
use crate::error::{Error, LoadError, Result, Stage};
use crate::session::{round_gpr, runtime, GpuMem, KernelMeta};

/// EXPERIMENTAL. A kernel resident in a code buffer of the open session.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OmegaGpuKernel {
    /// The code buffer; release it with `omega_gpu_session_free(&k.code)`.
    pub code: GpuMem,
    /// GPU address of the first instruction: `OmegaGpuLaunch.code_va`.
    pub entry_va: u64,
    /// Registers per thread, rounded as a launch rounds them: `OmegaGpuLaunch.gpr_count`.
    pub gpr_count: u32,
    /// Static shared memory per block the kernel declares.
    pub shared_bytes: u32,
    /// Local memory (stack) per thread.
    pub local_bytes: u32,
    /// Bytes of parameters: the launch passes at least `param_bytes / 4` argument words.
    pub param_bytes: u32,
}

static_assertions::assert_eq_size!(OmegaGpuKernel, [u64; 8]);

/// Places `image` (built for the buffer's address by `build`) in a fresh code buffer and registers `meta`
/// under `entry_va = buffer + entry_offset`. Frees the buffer again on any failure after the allocation
/// (the registration included).
fn place(
    size: usize,
    build: impl FnOnce(u64) -> Result<Vec<u8>>,
    entry_offset: u64,
    meta: impl FnOnce(u64) -> KernelMeta,
) -> Result<OmegaGpuKernel> {
    let rt = runtime();
    let mut mem = rt.alloc_code(size)?;
    let entry_va = mem.va + entry_offset;
    let placed = (|| {
        let image = build(mem.va)?;
        if mem.cpu.is_null() || image.len() > mem.size {
            return Err(Error::Load(LoadError::CodeDoesNotFit { bytes: image.len() }));
        }
        // SAFETY: the code buffer was just allocated with a CPU view of `mem.size >= image.len()` bytes, and
        // nothing else references it yet (no launch has its address).
        unsafe { core::ptr::copy_nonoverlapping(image.as_ptr(), mem.cpu.cast::<u8>(), image.len()) };
        rt.sync_to_gpu(&mem)?;
        let meta = meta(mem.va);
        let k = OmegaGpuKernel {
            code: mem,
            entry_va,
            gpr_count: round_gpr(meta.registers),
            shared_bytes: meta.static_shared_bytes,
            local_bytes: meta.local_bytes_per_thread,
            param_bytes: meta.param_bytes,
        };
        rt.register_kernel(entry_va, meta)?;
        Ok(k)
    })();
    if placed.is_err() {
        // The placement's failure is what the caller hears of; this release of a buffer just allocated
        // under the lock is not expected to fail, and leaves nothing to release if it does.
        let _ = rt.free(&mut mem);
    }
    placed
}

fn load(name: &str) -> Result<OmegaGpuKernel> {
    let rt = runtime();
    rt.require_lock(Stage::Load)?;
    let prepared = crate::loader::prepare_named(name)?;
    place(prepared.image_bytes, |va| prepared.relocate(va), prepared.entry_offset, |va| prepared.meta_at(va))
}

/// EXPERIMENTAL. Loads repository kernel `name` (`"vector_add"`, ...; the files of `kernels/`) into a new
/// code buffer and writes it to `*out`: the sm_90 cubin on the GPU, the simulator's code image on the
/// simulator. Caller holds the lock, device open, not latched. Returns 0, or -1 with the stage named
/// (`load` for an unknown kernel or one this build has no code for; `*out` zeroed). Launch it with
/// `code_va = out->entry_va` and `gpr_count = out->gpr_count`; release it with
/// `omega_gpu_session_free(&out->code)`.
///
/// # Safety
/// - `name` is NULL (refused) or a NUL-terminated string.
/// - `out` is NULL (refused) or points to a writable, aligned `OmegaGpuKernel`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_kernel_load(name: *const c_char, out: *mut OmegaGpuKernel) -> c_int {
    status("omega_gpu_kernel_load", || {
        // SAFETY: by the caller's promise `out` is NULL or points to a writable OmegaGpuKernel.
        let out = unsafe { out.as_mut() }.ok_or(null(Stage::Load, "out"))?;
        *out = OmegaGpuKernel::default();
        // SAFETY: forwarded from the caller.
        let name = unsafe { c_str(Stage::Load, "name", name) }?;
        *out = load(name)?;
        Ok(())
    })
}
