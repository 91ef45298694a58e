//! `omega_gpu_platform.h`: the platform contract as C sees it — its ABI number, the service, rights,
//! cache and handle-kind constants, the refusal names, the typed handles, the service table a C program
//! can install (`OmegaGpuPlatform`, through `omega_gpu_session_set_platform`), the simulator's own table
//! (`omega_gpu_platform_sim`), the checks a table and a buffer descriptor go through, the handle table a
//! C backend may keep, and the simulator's fault hook.
//!
//! The platform contract's entries are EXPERIMENTAL (section 9.3 of the runtime API document) except the
//! ABI number, the handle kinds and the handle types, which are STABLE. The table's types and the
//! adapter that drives one are `omega_hal::ctable`; the values here are the `omega-hal` ones, asserted
//! equal below.

use core::ffi::{c_char, c_int, c_void, CStr};
use std::ffi::CString;

use crate::core::c_abi::{
    self as ctable, OmegaGpuBufferDesc, OmegaGpuHandleTable, OmegaGpuPlatform, OpenRefused, TableRefusal,
};
use crate::core::c_abi::{
    negotiate, BufferKind, CachePolicy, CodeFormat, Handle, HandleError, Refusal, Rights, Services,
};
use crate::platform::TableInstallError;
use crate::testing::SimFault;

use super::boundary::{code, entry, guard, null, status};
use crate::error::{Error, PlatformError, Result, SettingError, Stage};
use crate::session::runtime;
use crate::sync::{self, Mutex};

/// Platform contract major number. A platform major bump needs a runtime API major bump.
pub const OMEGA_GPU_PLATFORM_ABI_MAJOR: u32 = 1;
/// Platform contract minor number. A platform minor bump needs at least a runtime API minor bump.
pub const OMEGA_GPU_PLATFORM_ABI_MINOR: u32 = 2;

/// Service: monotonic nanosecond clock and sleep.
pub const OMEGA_GPU_SVC_CLOCK: u32 = 1 << 0;
/// Service: the process-wide locks.
pub const OMEGA_GPU_SVC_LOCK: u32 = 1 << 1;
/// Service: device-visible memory with rights and cache policy.
pub const OMEGA_GPU_SVC_DEVICE_MEM: u32 = 1 << 2;
/// Service: the submission queue.
pub const OMEGA_GPU_SVC_SUBMIT: u32 = 1 << 3;
/// Service: completion polling of marker words (never interrupts).
pub const OMEGA_GPU_SVC_POLL: u32 = 1 << 4;
/// Service: CPU-only memory, for freestanding builds.
pub const OMEGA_GPU_SVC_HOST_MEM: u32 = 1 << 5;
/// Service: CPU/GPU visibility sync of a buffer.
pub const OMEGA_GPU_SVC_SYNC: u32 = 1 << 6;
/// Service: device open, close and query.
pub const OMEGA_GPU_SVC_DEVICE: u32 = 1 << 7;
/// The services the session needs (every one but HOST_MEM): what `omega_gpu_platform_check` asks of a
/// table, and what `omega_gpu_session_set_platform` refuses a table without.
pub const OMEGA_GPU_SVC_SESSION: u32 = 0xDF;

/// Right: the CPU may read its view.
pub const OMEGA_GPU_RIGHT_CPU_READ: u32 = 1 << 0;
/// Right: the CPU may write its view.
pub const OMEGA_GPU_RIGHT_CPU_WRITE: u32 = 1 << 1;
/// Right: the GPU may read.
pub const OMEGA_GPU_RIGHT_GPU_READ: u32 = 1 << 2;
/// Right: the GPU may write.
pub const OMEGA_GPU_RIGHT_GPU_WRITE: u32 = 1 << 3;
/// Right: the GPU may execute (kernel code). Never together with GPU_WRITE.
pub const OMEGA_GPU_RIGHT_GPU_EXEC: u32 = 1 << 4;
/// Right: the CPU polls words the GPU writes here, so the range must be GPU-uncached.
pub const OMEGA_GPU_RIGHT_HOST_POLLED: u32 = 1 << 5;

/// Cache policy: GPU-uncached (every ordinary session buffer).
pub const OMEGA_GPU_CACHE_UNCACHED: u32 = 0;
/// Cache policy: GPU-cached, for write-once, GPU-read-only, never-polled contents.
pub const OMEGA_GPU_CACHE_CACHED: u32 = 1;

/// Handle kind of an ordinary data buffer (`OmegaGpuMem.kind`).
pub const OMEGA_GPU_HANDLE_BUF_DATA: u32 = 1;
/// Handle kind of a kernel-code buffer (`OmegaGpuMem.kind`).
pub const OMEGA_GPU_HANDLE_BUF_CODE: u32 = 2;
/// Handle kind of a queue buffer of the session's own: ring, markers, descriptors (`OmegaGpuMem.kind`).
pub const OMEGA_GPU_HANDLE_BUF_QUEUE: u32 = 3;

/// Refusal: the platform's ABI major differs from the runtime's.
pub const OMEGA_GPU_PLAT_ABI_MAJOR: c_int = 1;
/// Refusal: the platform's ABI minor is older than the runtime needs.
pub const OMEGA_GPU_PLAT_ABI_MINOR: c_int = 2;
/// Refusal: a needed service is absent (refused, never emulated).
pub const OMEGA_GPU_PLAT_MISSING_SERVICE: c_int = 3;
/// Refusal: a byte range of zero bytes.
pub const OMEGA_GPU_PLAT_ZERO_LENGTH: c_int = 4;
/// Refusal: a byte range with no rights.
pub const OMEGA_GPU_PLAT_NO_RIGHTS: c_int = 5;
/// Refusal: a HOST_POLLED range asked to be GPU-cached.
pub const OMEGA_GPU_PLAT_POLLED_CACHED: c_int = 6;
/// Refusal: GPU_EXEC and GPU_WRITE on one range.
pub const OMEGA_GPU_PLAT_EXEC_WRITABLE: c_int = 7;
/// Refusal: a length or address past what the platform can describe.
pub const OMEGA_GPU_PLAT_OVERFLOW: c_int = 8;
/// Refusal: a GPU-cached range the GPU may write or the CPU polls.
pub const OMEGA_GPU_PLAT_CACHED_WRITABLE: c_int = 9;
/// Refusal: a field holds a value the contract does not define (an unknown cache policy, kind, order,
/// code format or service bit; a page size that is not a power of two).
pub const OMEGA_GPU_PLAT_BAD_VALUE: c_int = 10;

/// `OmegaGpuPlatformError.kind`: no device of this platform is present.
pub const OMEGA_GPU_PLAT_ERR_NO_DEVICE: u32 = 1;
/// `OmegaGpuPlatformError.kind`: the device ran out of memory.
pub const OMEGA_GPU_PLAT_ERR_OUT_OF_MEMORY: u32 = 2;
/// `OmegaGpuPlatformError.kind`: the driver refused the call (`status`: its status or errno).
pub const OMEGA_GPU_PLAT_ERR_DRIVER: u32 = 3;
/// `OmegaGpuPlatformError.kind`: the driver's version is not one the platform knows.
pub const OMEGA_GPU_PLAT_ERR_UNSUPPORTED_DRIVER: u32 = 4;
/// `OmegaGpuPlatformError.kind`: the device was lost.
pub const OMEGA_GPU_PLAT_ERR_LOST: u32 = 5;
/// `OmegaGpuPlatformError.kind`: the platform cannot do this at all.
pub const OMEGA_GPU_PLAT_ERR_UNSUPPORTED: u32 = 6;
/// `OmegaGpuPlatformError.kind`: the contract refused a descriptor (`status`: the `OMEGA_GPU_PLAT_*` code).
pub const OMEGA_GPU_PLAT_ERR_REFUSED: u32 = 7;
/// Bytes of the texts in `OmegaGpuPlatformError` and `OmegaGpuChannelFault`, the NUL included.
pub const OMEGA_GPU_PLATFORM_TEXT_BYTES: u32 = 256;

/// `OmegaGpuPlatformCaps.code_format`: the device's own machine code (a cubin's relocated image).
pub const OMEGA_GPU_CODE_MACHINE: u32 = 0;
/// `OmegaGpuPlatformCaps.code_format`: the simulator's code images, naming host kernels (what
/// `omega_gpu_platform_sim()` declares, so a table forwarding to it declares it too).
pub const OMEGA_GPU_CODE_SIM_IMAGE: u32 = 1;

/// `OmegaGpuLaunchDesc.order`: waits for every earlier launch of the submission.
pub const OMEGA_GPU_ORDER_AFTER_PREVIOUS: u32 = 0;
/// `OmegaGpuLaunchDesc.order`: may overlap the launch before it.
pub const OMEGA_GPU_ORDER_INDEPENDENT: u32 = 1;
/// `OmegaGpuLaunchDesc.order`: no ordering at all (test-only barrier mode).
pub const OMEGA_GPU_ORDER_UNORDERED: u32 = 2;

/// `omega_gpu_handles_*`: the handle has generation 0 (never issued).
pub const OMEGA_GPU_HANDLE_ERR_ZERO: c_int = 1;
/// `omega_gpu_handles_*`: the handle's index is past the table.
pub const OMEGA_GPU_HANDLE_ERR_OUT_OF_RANGE: c_int = 2;
/// `omega_gpu_handles_*`: the slot was closed since the handle was issued.
pub const OMEGA_GPU_HANDLE_ERR_STALE: c_int = 3;
/// `omega_gpu_handles_open`: every slot holds a value.
pub const OMEGA_GPU_HANDLE_ERR_FULL: c_int = 4;
/// `omega_gpu_handles_*`: a NULL table, storage, value or out pointer.
pub const OMEGA_GPU_HANDLE_ERR_NULL: c_int = 5;

/// Simulator fault: the next submission never releases its markers (a kernel that never ends).
pub const OMEGA_GPU_SIM_FAULT_HANG: c_int = 1;
/// Simulator fault: the next completion poll is refused.
pub const OMEGA_GPU_SIM_FAULT_REFUSE_POLL: c_int = 2;
/// Simulator fault: the next device allocation fails with out-of-memory.
pub const OMEGA_GPU_SIM_FAULT_FAIL_ALLOC: c_int = 3;
/// Simulator fault: the next launch faults with Xid 31 (an MMU fault); its markers never arrive.
pub const OMEGA_GPU_SIM_FAULT_KERNEL_FAULT: c_int = 4;
/// Simulator fault: the next device open fails, with the driver text "injected open failure".
pub const OMEGA_GPU_SIM_FAULT_FAIL_OPEN: c_int = 5;
/// Simulator fault: the next visibility sync fails.
pub const OMEGA_GPU_SIM_FAULT_FAIL_SYNC: c_int = 6;

const _: () = {
    assert!(OMEGA_GPU_PLATFORM_ABI_MAJOR == ctable::PLATFORM_ABI_MAJOR);
    assert!(OMEGA_GPU_PLATFORM_ABI_MINOR == ctable::PLATFORM_ABI_MINOR);
    assert!(OMEGA_GPU_SVC_CLOCK == Services::CLOCK.bits());
    assert!(OMEGA_GPU_SVC_LOCK == Services::LOCK.bits());
    assert!(OMEGA_GPU_SVC_DEVICE_MEM == Services::DEVICE_MEM.bits());
    assert!(OMEGA_GPU_SVC_SUBMIT == Services::SUBMIT.bits());
    assert!(OMEGA_GPU_SVC_POLL == Services::POLL.bits());
    assert!(OMEGA_GPU_SVC_HOST_MEM == Services::HOST_MEM.bits());
    assert!(OMEGA_GPU_SVC_SYNC == Services::SYNC.bits());
    assert!(OMEGA_GPU_SVC_DEVICE == Services::DEVICE.bits());
    assert!(OMEGA_GPU_SVC_SESSION == Services::SESSION.bits());
    assert!(OMEGA_GPU_PLAT_ERR_NO_DEVICE == ctable::err::NO_DEVICE);
    assert!(OMEGA_GPU_PLAT_ERR_OUT_OF_MEMORY == ctable::err::OUT_OF_MEMORY);
    assert!(OMEGA_GPU_PLAT_ERR_DRIVER == ctable::err::DRIVER);
    assert!(OMEGA_GPU_PLAT_ERR_UNSUPPORTED_DRIVER == ctable::err::UNSUPPORTED_DRIVER);
    assert!(OMEGA_GPU_PLAT_ERR_LOST == ctable::err::LOST);
    assert!(OMEGA_GPU_PLAT_ERR_UNSUPPORTED == ctable::err::UNSUPPORTED);
    assert!(OMEGA_GPU_PLAT_ERR_REFUSED == ctable::err::REFUSED);
    assert!(OMEGA_GPU_CODE_MACHINE == CodeFormat::Machine as u32);
    assert!(OMEGA_GPU_CODE_SIM_IMAGE == CodeFormat::SimImage as u32);
    assert!(OMEGA_GPU_ORDER_AFTER_PREVIOUS == ctable::order::AFTER_PREVIOUS);
    assert!(OMEGA_GPU_ORDER_INDEPENDENT == ctable::order::INDEPENDENT);
    assert!(OMEGA_GPU_ORDER_UNORDERED == ctable::order::UNORDERED);
    assert!(OMEGA_GPU_RIGHT_CPU_READ == Rights::CPU_READ.bits());
    assert!(OMEGA_GPU_RIGHT_CPU_WRITE == Rights::CPU_WRITE.bits());
    assert!(OMEGA_GPU_RIGHT_GPU_READ == Rights::GPU_READ.bits());
    assert!(OMEGA_GPU_RIGHT_GPU_WRITE == Rights::GPU_WRITE.bits());
    assert!(OMEGA_GPU_RIGHT_GPU_EXEC == Rights::GPU_EXEC.bits());
    assert!(OMEGA_GPU_RIGHT_HOST_POLLED == Rights::HOST_POLLED.bits());
    assert!(OMEGA_GPU_CACHE_UNCACHED == CachePolicy::Uncached as u32);
    assert!(OMEGA_GPU_CACHE_CACHED == CachePolicy::Cached as u32);
    assert!(OMEGA_GPU_HANDLE_BUF_DATA == BufferKind::Data as u32);
    assert!(OMEGA_GPU_HANDLE_BUF_CODE == BufferKind::Code as u32);
    assert!(OMEGA_GPU_HANDLE_BUF_QUEUE == BufferKind::Queue as u32);
    assert!(OMEGA_GPU_HANDLE_BUF_DATA == crate::session::HANDLE_BUF_DATA);
    assert!(OMEGA_GPU_HANDLE_BUF_CODE == crate::session::HANDLE_BUF_CODE);
    assert!(OMEGA_GPU_HANDLE_BUF_QUEUE == crate::session::HANDLE_BUF_QUEUE);
};

/// A handle to the device of the platform contract: `{index, generation}`, the same shape and rule as
/// `OmegaGpuBufferHandle` (generation 0 is never issued, so a zeroed handle means "none").
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OmegaGpuDeviceHandle {
    /// Slot in the owning table.
    pub index: u32,
    /// Slot generation at issue time; never 0 for an issued handle.
    pub generation: u32,
}

/// A handle to a submission queue of the platform contract: `{index, generation}`, the same shape and
/// rule as `OmegaGpuBufferHandle`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OmegaGpuQueueHandle {
    /// Slot in the owning table.
    pub index: u32,
    /// Slot generation at issue time; never 0 for an issued handle.
    pub generation: u32,
}

static_assertions::assert_eq_size!(OmegaGpuDeviceHandle, Handle);
static_assertions::assert_eq_size!(OmegaGpuQueueHandle, Handle);

static_assertions::const_assert_eq!(OMEGA_GPU_PLATFORM_TEXT_BYTES as usize, core::mem::size_of::<[c_char; 256]>());

/// The refusal code of `r` (`OMEGA_GPU_PLAT_*`).
pub fn refusal_code(r: &Refusal) -> c_int {
    r.code()
}

/// EXPERIMENTAL. The fixed name of refusal code `code` (`"OMEGA_GPU_PLAT_ZERO_LENGTH"`, ...), or `"unknown"`.
/// The string is static. Any thread, no lock.
#[no_mangle]
pub extern "C" fn omega_gpu_platform_refusal_name(code: c_int) -> *const c_char {
    guard("omega_gpu_platform_refusal_name", c"unknown".as_ptr(), || {
        let name = match code {
            OMEGA_GPU_PLAT_ABI_MAJOR => c"OMEGA_GPU_PLAT_ABI_MAJOR",
            OMEGA_GPU_PLAT_ABI_MINOR => c"OMEGA_GPU_PLAT_ABI_MINOR",
            OMEGA_GPU_PLAT_MISSING_SERVICE => c"OMEGA_GPU_PLAT_MISSING_SERVICE",
            OMEGA_GPU_PLAT_ZERO_LENGTH => c"OMEGA_GPU_PLAT_ZERO_LENGTH",
            OMEGA_GPU_PLAT_NO_RIGHTS => c"OMEGA_GPU_PLAT_NO_RIGHTS",
            OMEGA_GPU_PLAT_POLLED_CACHED => c"OMEGA_GPU_PLAT_POLLED_CACHED",
            OMEGA_GPU_PLAT_EXEC_WRITABLE => c"OMEGA_GPU_PLAT_EXEC_WRITABLE",
            OMEGA_GPU_PLAT_OVERFLOW => c"OMEGA_GPU_PLAT_OVERFLOW",
            OMEGA_GPU_PLAT_CACHED_WRITABLE => c"OMEGA_GPU_PLAT_CACHED_WRITABLE",
            OMEGA_GPU_PLAT_BAD_VALUE => c"OMEGA_GPU_PLAT_BAD_VALUE",
            _ => c"unknown",
        };
        name.as_ptr()
    })
}

// ----- the service table ---------------------------------------------------------------------------------

/// EXPERIMENTAL. A table whose services are the simulator's: a fresh simulated device (the repository's
/// kernels registered, `caps.code_format` `OMEGA_GPU_CODE_SIM_IMAGE`), every service filled. Install it as
/// it is (`omega_gpu_session_set_platform("my-sim", &t)`), or forward to it from a table of your own,
/// calling its functions with its `ctx`. Whoever does not install it calls `t.release(t.ctx)` once done
/// with it (a table that forwards to it does so in its own `release`). Any thread, no lock.
#[no_mangle]
pub extern "C" fn omega_gpu_platform_sim() -> OmegaGpuPlatform {
    guard("omega_gpu_platform_sim", OmegaGpuPlatform::EMPTY, || {
        crate::platform::export_table(crate::kernels::simulator())
    })
}

/// A table's refusal (stage `platform`).
fn refused(r: TableRefusal) -> Error {
    Error::Platform(PlatformError::Table(r))
}

/// What a check returns for its failure: a table's refusal its code, anything else (a NULL argument) -1.
fn check_code(e: &Error) -> c_int {
    match e {
        Error::Platform(PlatformError::Table(r)) => r.refusal.code(),
        other => code(other),
    }
}

/// The services named by `bits`, or the refusal of a bit no service has.
fn services(bits: u32) -> Result<Services, TableRefusal> {
    Services::from_bits(bits).ok_or(TableRefusal::from(Refusal::BadValue("needed")))
}

/// EXPERIMENTAL. Whether `*p` implements this runtime's platform ABI (`abi_major` equal to
/// `OMEGA_GPU_PLATFORM_ABI_MAJOR`, `abi_minor` at least `OMEGA_GPU_PLATFORM_ABI_MINOR`) and declares every
/// service in `needed` (`OMEGA_GPU_SVC_*` bits). Returns 0, or the refusal code (`OMEGA_GPU_PLAT_ABI_MAJOR`,
/// `_ABI_MINOR`, `_MISSING_SERVICE`, `_BAD_VALUE` for an unknown bit) with its text, stage `platform`, in
/// `omega_gpu_session_last_error()`; -1 for a NULL `p`. Any thread, no lock.
///
/// # Safety
/// - `p` is NULL or points to a readable, aligned `OmegaGpuPlatform`. Its functions are not called, so
///   none of them needs to be one that returns normally for this call: only the table's fields are read.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_platform_negotiate(p: *const OmegaGpuPlatform, needed: u32) -> c_int {
    entry("omega_gpu_platform_negotiate", -1, check_code, || {
        // SAFETY: by the caller's promise `p` is NULL or readable.
        let p = unsafe { p.as_ref() }.ok_or(null(Stage::PlatformNegotiate, "p"))?;
        services(needed)
            .and_then(|s| negotiate(&ctable::caps_of(p), s).map_err(TableRefusal::from))
            .map_err(refused)?;
        Ok(0)
    })
}

/// EXPERIMENTAL. Whether `*p` can serve `needed`: `omega_gpu_platform_negotiate`, then well-formed caps
/// (known service bits and code format, a power-of-two `page_bytes`, a `param_base` that is a multiple of
/// 4), then every function of every service the table declares present. A declared service with a NULL
/// function is `OMEGA_GPU_PLAT_MISSING_SERVICE` naming the service and the function
/// (`platform: OMEGA_GPU_PLAT_MISSING_SERVICE: OMEGA_GPU_SVC_SUBMIT (OmegaGpuSubmitService.submit is NULL)`).
/// Returns 0 or the refusal code, as `omega_gpu_platform_negotiate` does. Any thread, no lock.
///
/// # Safety
/// - `p` is NULL or points to a readable, aligned `OmegaGpuPlatform`. Its functions are not called (each
///   only has to be there), so none of them needs to be one that returns normally for this call.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_platform_check_for(p: *const OmegaGpuPlatform, needed: u32) -> c_int {
    entry("omega_gpu_platform_check_for", -1, check_code, || {
        // SAFETY: by the caller's promise `p` is NULL or readable.
        let p = unsafe { p.as_ref() }.ok_or(null(Stage::PlatformCheck, "p"))?;
        services(needed).and_then(|s| ctable::check_for(p, s)).map_err(refused)?;
        Ok(0)
    })
}

/// EXPERIMENTAL. `omega_gpu_platform_check_for(p, OMEGA_GPU_SVC_SESSION)`: exactly the check
/// `omega_gpu_session_set_platform` makes before it installs a table.
///
/// # Safety
/// - `p` is NULL or points to a readable, aligned `OmegaGpuPlatform`. Its functions are not called, so
///   none of them needs to be one that returns normally for this call.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_platform_check(p: *const OmegaGpuPlatform) -> c_int {
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_platform_check", -1, || unsafe { omega_gpu_platform_check_for(p, OMEGA_GPU_SVC_SESSION) })
}

/// EXPERIMENTAL. The contract's buffer rules, applied before any platform sees a descriptor: a length
/// (`OMEGA_GPU_PLAT_ZERO_LENGTH`), at most 2^48 bytes (`_OVERFLOW`), some rights (`_NO_RIGHTS`), a HOST_POLLED
/// range GPU-uncached (`_POLLED_CACHED`), never GPU_EXEC with GPU_WRITE (`_EXEC_WRITABLE`), a GPU-cached
/// range GPU-read-only and not polled (`_CACHED_WRITABLE`), and every field a defined value
/// (`_BAD_VALUE`). Returns 0 or the refusal code, its text recorded (stage `platform`); -1 for a NULL `d`.
/// Any thread, no lock.
///
/// # Safety
/// - `d` is NULL or points to a readable, aligned `OmegaGpuBufferDesc`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_platform_check_buffer(d: *const OmegaGpuBufferDesc) -> c_int {
    entry("omega_gpu_platform_check_buffer", -1, check_code, || {
        // SAFETY: by the caller's promise `d` is NULL or readable.
        let d = unsafe { d.as_ref() }.ok_or(null(Stage::PlatformCheck, "d"))?;
        d.to_hal().map_err(|r| refused(r.into()))?;
        Ok(0)
    })
}

/// The names of the tables installed so far, kept for the life of the process: a platform's name is a
/// static string (`omega_gpu_session_platform`), and there are as many as distinct names installed.
static TABLE_NAMES: Mutex<Vec<&'static CStr>> = Mutex::new(Vec::new());

/// `name` as a static C string, made once per distinct name.
fn intern(name: &str) -> Option<&'static CStr> {
    let mut names = sync::lock(&TABLE_NAMES);
    if let Some(n) = names.iter().find(|n| n.to_bytes() == name.as_bytes()) {
        return Some(n);
    }
    let leaked: &'static CStr = Box::leak(CString::new(name).ok()?.into_boxed_c_str());
    names.push(leaked);
    Some(leaked)
}

/// The static C string of an installed table's name, if `name` is one.
pub(crate) fn table_name(name: &str) -> Option<*const c_char> {
    sync::lock(&TABLE_NAMES).iter().find(|n| n.to_bytes() == name.as_bytes()).map(|n| n.as_ptr())
}

/// Installs a copy of `*table` under `name` (the half of `omega_gpu_session_set_platform` that takes a
/// table): the name checked, the table checked (`omega_gpu_platform_check`), then installed as
/// `Runtime::install` installs any platform (the caller holds the lock, the device is closed, the
/// process not latched). On success the runtime owns the table's `ctx` and calls its `release` once the
/// table is replaced and unused; on refusal nothing is kept and nothing released.
///
/// # Safety
/// - `*table` keeps the rules of `OmegaGpuPlatform`'s Safety section for as long as it stays installed.
pub(crate) unsafe fn install_table(name: &str, table: &OmegaGpuPlatform) -> Result<()> {
    let refuse = |detail| Err(Error::Setting { stage: Stage::SetPlatform, detail });
    match name {
        "sim" => return refuse(SettingError::BuiltInName("sim")),
        "nvidia" => return refuse(SettingError::BuiltInName("nvidia")),
        _ => {}
    }
    if name.is_empty() || name.len() > 63 || !name.bytes().all(|b| b.is_ascii_graphic()) {
        return refuse(SettingError::BadTableName);
    }
    let Some(cname) = intern(name) else { return refuse(SettingError::NameNotCString) };
    let name: &'static str = cname.to_str().expect("checked ASCII above");
    // SAFETY: forwarded from the caller (the table keeps its Safety section while installed).
    unsafe { crate::platform::install_table(runtime(), table, name) }.map_err(|e| match e {
        TableInstallError::Table(r) => refused(r),
        TableInstallError::Install(e) => e,
    })
}

// ----- the handle table ----------------------------------------------------------------------------------

/// The C answer of a check or close: the value to `*out` (NULL on failure) and 0 or the error's code.
fn handle_answer(r: Result<*mut c_void, HandleError>, out: Option<&mut *mut c_void>) -> c_int {
    if let Some(out) = out {
        *out = *r.as_ref().unwrap_or(&core::ptr::null_mut());
    }
    match r {
        Ok(_) => 0,
        Err(HandleError::Zero) => OMEGA_GPU_HANDLE_ERR_ZERO,
        Err(HandleError::OutOfRange(_)) => OMEGA_GPU_HANDLE_ERR_OUT_OF_RANGE,
        Err(HandleError::Stale { .. }) => OMEGA_GPU_HANDLE_ERR_STALE,
    }
}

/// EXPERIMENTAL. Makes `*t` a handle table over `capacity` slots of the caller's storage: `generations`
/// and `values`, `capacity` elements each, every slot free. Returns 0, or `OMEGA_GPU_HANDLE_ERR_NULL` for a
/// NULL pointer or a capacity of 0. Any thread; one call at a time per table.
///
/// # Safety
/// - `t` is NULL or points to a writable, aligned `OmegaGpuHandleTable`; `generations` and `values` are
///   NULL or each point to `capacity` writable, aligned elements that only this table uses, for as long as
///   it is used.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_handles_init(
    t: *mut OmegaGpuHandleTable,
    generations: *mut u32,
    values: *mut *mut c_void,
    capacity: u32,
) -> c_int {
    guard("omega_gpu_handles_init", OMEGA_GPU_HANDLE_ERR_NULL, || {
        // SAFETY: by the caller's promise `t` is NULL or writable.
        let Some(t) = (unsafe { t.as_mut() }) else { return OMEGA_GPU_HANDLE_ERR_NULL };
        if generations.is_null() || values.is_null() || capacity == 0 {
            return OMEGA_GPU_HANDLE_ERR_NULL;
        }
        // SAFETY: forwarded from the caller; both pointers are non-NULL (checked).
        *t = unsafe { OmegaGpuHandleTable::init(generations, values, capacity) };
        0
    })
}

/// EXPERIMENTAL. Stores `value` (not NULL: NULL marks a free slot) in the first free slot of `*t` and
/// writes its handle to `*out`: `{index, generation}`, generation never 0. Returns 0,
/// `OMEGA_GPU_HANDLE_ERR_FULL`, or `OMEGA_GPU_HANDLE_ERR_NULL` (`*out` zeroed where it can be).
///
/// # Safety
/// - `t` is NULL or points to a writable, aligned table `omega_gpu_handles_init` made, whose storage is
///   still the table's; `out` is NULL or points to a writable, aligned `OmegaGpuBufferHandle`. No other
///   call on `*t` runs meanwhile.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_handles_open(
    t: *mut OmegaGpuHandleTable,
    value: *mut c_void,
    out: *mut Handle,
) -> c_int {
    guard("omega_gpu_handles_open", OMEGA_GPU_HANDLE_ERR_NULL, || {
        // SAFETY: by the caller's promise each is NULL or valid.
        let (Some(t), Some(out)) = (unsafe { t.as_mut() }, unsafe { out.as_mut() }) else {
            return OMEGA_GPU_HANDLE_ERR_NULL;
        };
        *out = Handle::NONE;
        // SAFETY: forwarded from the caller: the storage is the table's and no other call runs.
        match unsafe { t.open(value) } {
            Ok(h) => {
                *out = h;
                0
            }
            Err(OpenRefused::Full(_)) => OMEGA_GPU_HANDLE_ERR_FULL,
            Err(OpenRefused::NullValue) => OMEGA_GPU_HANDLE_ERR_NULL,
        }
    })
}

/// EXPERIMENTAL. The value behind `h` in `*t`, to `*value` when `value` is not NULL. Returns 0, or
/// `OMEGA_GPU_HANDLE_ERR_ZERO` (generation 0), `_OUT_OF_RANGE`, `_STALE` (closed since it was issued) or
/// `_NULL`, with `*value` NULL.
///
/// # Safety
/// - `t` is NULL or points to a readable, aligned table `omega_gpu_handles_init` made, whose storage is
///   still the table's, and no other call on `*t` runs meanwhile; `value` is NULL or points to a
///   writable, aligned `void *`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_handles_check(
    t: *const OmegaGpuHandleTable,
    h: Handle,
    value: *mut *mut c_void,
) -> c_int {
    guard("omega_gpu_handles_check", OMEGA_GPU_HANDLE_ERR_NULL, || {
        // SAFETY: by the caller's promise each is NULL or valid.
        let (t, out) = unsafe { (t.as_ref(), value.as_mut()) };
        let Some(t) = t else { return OMEGA_GPU_HANDLE_ERR_NULL };
        // SAFETY: forwarded from the caller.
        handle_answer(unsafe { t.check(h) }, out)
    })
}

/// EXPERIMENTAL. Removes the value behind `h` from `*t` (to `*value` when `value` is not NULL): every copy
/// of `h` is stale from then on and the slot is free for a later open, under a new generation. Returns
/// 0 or the error codes of `omega_gpu_handles_check`.
///
/// # Safety
/// - `t` is NULL or points to a writable, aligned table `omega_gpu_handles_init` made, whose storage is
///   still the table's, and no other call on `*t` runs meanwhile; `value` is NULL or points to a
///   writable, aligned `void *`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_handles_close(
    t: *mut OmegaGpuHandleTable,
    h: Handle,
    value: *mut *mut c_void,
) -> c_int {
    guard("omega_gpu_handles_close", OMEGA_GPU_HANDLE_ERR_NULL, || {
        // SAFETY: by the caller's promise each is NULL or valid.
        let (t, out) = unsafe { (t.as_mut(), value.as_mut()) };
        let Some(t) = t else { return OMEGA_GPU_HANDLE_ERR_NULL };
        // SAFETY: forwarded from the caller.
        handle_answer(unsafe { t.close(h) }, out)
    })
}

/// EXPERIMENTAL, test hook. Queues fault `fault` (`OMEGA_GPU_SIM_FAULT_*`) on the simulated platform; it
/// fires on the first operation it applies to. Returns 0, or -1 (stage `sim inject`) for an unknown fault
/// or when the installed platform is not the simulator. Any thread, no lock: it touches only the
/// simulator's own state.
#[no_mangle]
pub extern "C" fn omega_gpu_sim_inject(fault: c_int) -> c_int {
    status("omega_gpu_sim_inject", || {
        let f = match fault {
            OMEGA_GPU_SIM_FAULT_HANG => SimFault::Hang,
            OMEGA_GPU_SIM_FAULT_REFUSE_POLL => SimFault::RefusePoll,
            OMEGA_GPU_SIM_FAULT_FAIL_ALLOC => SimFault::FailAlloc,
            OMEGA_GPU_SIM_FAULT_KERNEL_FAULT => SimFault::KernelFault(31),
            OMEGA_GPU_SIM_FAULT_FAIL_OPEN => SimFault::FailOpen("injected open failure".into()),
            OMEGA_GPU_SIM_FAULT_FAIL_SYNC => SimFault::FailSync,
            other => return Err(Error::Setting { stage: Stage::SimInject, detail: SettingError::UnknownFault(other) }),
        };
        crate::testing::inject(runtime(), f)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_has_its_code_and_name() {
        let all = [
            Refusal::AbiMajor { platform: 2, runtime: 1 },
            Refusal::AbiMinor { platform: 1, runtime: 2 },
            Refusal::MissingService(Services::POLL),
            Refusal::ZeroLength,
            Refusal::NoRights,
            Refusal::PolledCached,
            Refusal::ExecWritable,
            Refusal::Overflow,
            Refusal::CachedWritable,
            Refusal::BadValue("caps.page_bytes"),
        ];
        for r in all {
            let p = omega_gpu_platform_refusal_name(refusal_code(&r));
            // SAFETY: the function returns a static NUL-terminated string.
            let name = unsafe { core::ffi::CStr::from_ptr(p) }.to_str().unwrap();
            assert_eq!(name, r.name());
        }
        // SAFETY: as above.
        let unknown = unsafe { core::ffi::CStr::from_ptr(omega_gpu_platform_refusal_name(0)) };
        assert_eq!(unknown.to_str().unwrap(), "unknown");
    }
}
