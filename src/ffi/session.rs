//! `omega_gpu_session.h`: the session — lock, open and close, memory, launch, errors, the latch and its
//! parked buffers — over [`crate::session::Runtime`].
//!
//! Every function is a thin shell: pointer checks, one call into the core, the contract's return code.
//! The structs are the core's own `#[repr(C)]` types (`src/core/session/types.rs`), renamed for C by cbindgen.

use core::ffi::{c_char, c_int, c_void};
use core::ptr;

use crate::core::c_abi::{Handle, OmegaGpuPlatform};

use super::boundary::{c_str, guard, last_error_ptr, null, or, record, status};
use crate::error::{Error, Result, SettingError, Stage};
use crate::platform::PlatformKind;
use crate::session::{runtime, AllocStats, GpuMem, LaunchSpec, MemInfo, ParkStats, RawLaunch, Scratch};
use crate::sync::{self, Mutex};

/// The session lock's id in the platform LOCK service.
pub const OMEGA_GPU_SESSION_LOCK_ID: u32 = 0;
/// Most argument words one launch passes (`OmegaGpuLaunch.n_args`).
pub const OMEGA_GPU_SESSION_MAX_ARGS: u32 = 32;
/// Largest marker-poll spin window in microseconds (`omega_gpu_session_set_spin_us`).
pub const OMEGA_GPU_SESSION_MAX_SPIN_US: u32 = 100000;
/// Parked buffers listed by handle; later ones are only counted (`OmegaGpuParkStats.untracked`).
pub const OMEGA_GPU_SESSION_PARK_MAX: u32 = 512;
/// `omega_gpu_session_scratch`: a request past an active reservation; nothing was allocated.
pub const OMEGA_GPU_SESSION_SCRATCH_RESERVED: c_int = -2;
/// `omega_gpu_session_launch`: the launch saw a cancel request.
pub const OMEGA_GPU_SESSION_CANCELLED: c_int = -3;
/// Shared memory per block a launch gets when its `shared_bytes` is 0.
pub const OMEGA_GPU_SESSION_DEFAULT_SHARED_BYTES: u32 = 1024;
/// INTERNAL. Most hooks `omega_gpu_session_on_close` takes.
pub const OMEGA_GPU_SESSION_ON_CLOSE_MAX: u32 = 8;

/// `omega_gpu_session_completion_mode`: no platform, or one without the POLL service; launches are refused.
pub const OMEGA_GPU_COMPLETION_NONE: u32 = 0;
/// `omega_gpu_session_completion_mode`: the platform's sleep-poll of the completion word.
pub const OMEGA_GPU_COMPLETION_SLEEP_POLL: u32 = 1;
/// `omega_gpu_session_completion_mode`: a spin-poll window (`omega_gpu_session_set_spin_us`), then the
/// platform's sleep-poll. Completion is never an interrupt.
pub const OMEGA_GPU_COMPLETION_SPIN_POLL: u32 = 2;

const _: () = {
    use crate::session as core;
    assert!(OMEGA_GPU_SESSION_LOCK_ID == core::LOCK_ID);
    assert!(OMEGA_GPU_SESSION_MAX_ARGS == core::MAX_ARGS);
    assert!(OMEGA_GPU_SESSION_MAX_SPIN_US == core::MAX_SPIN_US);
    assert!(OMEGA_GPU_SESSION_PARK_MAX as usize == core::PARK_MAX);
    assert!(OMEGA_GPU_SESSION_SCRATCH_RESERVED == core::SCRATCH_RESERVED);
    assert!(OMEGA_GPU_SESSION_CANCELLED == core::CANCELLED);
    assert!(OMEGA_GPU_SESSION_DEFAULT_SHARED_BYTES == core::DEFAULT_SHARED_BYTES);
    assert!(OMEGA_GPU_SESSION_ON_CLOSE_MAX as usize == core::ON_CLOSE_MAX);
};

/// EXPERIMENTAL fields. What `omega_gpu_session_open` points to while the device is open: the session's
/// own launch buffer. A caller needs none of it; treat the pointer as "the device is open".
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OmegaGpuSession {
    /// The launch buffer the session polls: two completion markers (an `OMEGA_GPU_HANDLE_BUF_QUEUE`
    /// buffer). The session's own: `omega_gpu_session_free` refuses it. Parked, never released, once the
    /// process latches.
    pub launch_buffer: GpuMem,
    /// Device opens in this process so far, this one included.
    pub open_count: u32,
    /// Zero.
    pub reserved: u32,
}

static_assertions::assert_eq_size!(OmegaGpuSession, [u64; 6]);

/// EXPERIMENTAL. What the open device reports (`omega_gpu_device_query`); defined with the platform
/// contract's DEVICE service (`omega_gpu_platform.h`), whose `open` fills it.
pub use crate::core::c_abi::OmegaGpuDeviceInfo;

/// The object `omega_gpu_session_open` points to. Raw pointers are not `Send`; this one is only an address
/// handed to C, never dereferenced by Rust, so sharing it between threads is sound.
struct SessionCell(OmegaGpuSession);

// SAFETY: the only non-Send field is `launch_buffer.cpu`, an address Rust never dereferences through this
// cell; C reads it under the session lock as the contract requires.
unsafe impl Send for SessionCell {}

static SESSION: Mutex<SessionCell> =
    Mutex::new(SessionCell(OmegaGpuSession { launch_buffer: GpuMem::NONE, open_count: 0, reserved: 0 }));

/// A close hook registered from C: the function and its context pointer.
struct CHook {
    hook: unsafe extern "C" fn(*mut c_void),
    ctx: *mut c_void,
}

// SAFETY: the context pointer is the C caller's; close runs the hook on whichever thread calls close, and
// `omega_gpu_session_on_close` documents that the context must be usable from any thread.
unsafe impl Send for CHook {}

// ----- lock ----------------------------------------------------------------------------------------------

/// STABLE. Takes the process-wide session lock (platform LOCK service, id `OMEGA_GPU_SESSION_LOCK_ID`),
/// blocking until it is free. Does not touch the device. Not recursive: taking it twice on one thread waits
/// forever. With no platform installable it does nothing, and the open that follows refuses with stage
/// `platform` and the reason (as do the unlock, close and every call after it that needs the lock).
#[no_mangle]
pub extern "C" fn omega_gpu_session_lock() {
    or("omega_gpu_session_lock", (), || runtime().lock())
}

/// STABLE. Releases the session lock. From a thread that does not hold it: refused (stage `lock`), the
/// lock is left as it was. Refused the same way while the library pins the lock, because it holds CPU
/// views of session buffers across code it does not control and an unlock would let another thread close
/// the device under them: during `omega_gpu_execute` on the session backend (a clock function calling
/// it), inside an on-close hook, and under a Rust lock token.
#[no_mangle]
pub extern "C" fn omega_gpu_session_unlock() {
    or("omega_gpu_session_unlock", (), || runtime().unlock())
}

// ----- open / close --------------------------------------------------------------------------------------

/// STABLE. Opens the device on first use; later calls find it open. Caller holds the lock. Returns a
/// non-NULL pointer while the device is open (its fields are EXPERIMENTAL), or NULL when the process is
/// latched, no platform is installed, the caller does not hold the lock, or the open failed; the stage
/// is in `omega_gpu_session_last_error()`, with the driver's own text for a driver refusal.
#[no_mangle]
pub extern "C" fn omega_gpu_session_open() -> *mut OmegaGpuSession {
    or("omega_gpu_session_open", ptr::null_mut(), || {
        let rt = runtime();
        rt.open()?;
        let launch_buffer = sync::lock(&rt.session)
            .markers
            .map(|(handle, a)| GpuMem {
                handle,
                kind: crate::session::HANDLE_BUF_QUEUE,
                cpu: a.cpu.cast(),
                va: a.va,
                size: a.bytes as usize,
            })
            .unwrap_or(GpuMem::NONE);
        let mut cell = sync::lock(&SESSION);
        cell.0 = OmegaGpuSession { launch_buffer, open_count: rt.open_count(), reserved: 0 };
        // The cell is a static, so the pointer outlives the guard. Only a caller holding the session lock
        // gets here (open checked it), so no other open rewrites the cell while that caller reads it.
        Ok(&mut cell.0 as *mut OmegaGpuSession)
    })
}

/// STABLE. True while the device is open. Any thread.
#[no_mangle]
pub extern "C" fn omega_gpu_session_is_open() -> bool {
    guard("omega_gpu_session_is_open", false, || runtime().is_open())
}

/// STABLE. 1 once an uncertain completion (a completion wait that ran out, a refused completion poll, a
/// cancel after submit) has latched this process, else 0. One atomic load: any thread, no lock.
#[no_mangle]
pub extern "C" fn omega_gpu_session_is_blocked() -> c_int {
    guard("omega_gpu_session_is_blocked", 1, || c_int::from(runtime().is_blocked()))
}

/// STABLE. Closes the device and frees every session buffer (running the on-close hooks first). Takes the
/// lock itself: call it without the lock (a caller that holds it is refused, stage `lock`, instead of
/// waiting forever). Refused, a no-op, after an uncertain completion (stage `close`), checked again after
/// the hooks. The next open reopens; every handle of the closed device is stale from then on. The lock is
/// released when it returns, also after a hook panicked (`internal: panic in omega_gpu_session_close`,
/// the device closed all the same).
#[no_mangle]
pub extern "C" fn omega_gpu_session_close() {
    or("omega_gpu_session_close", (), || runtime().close())
}

/// EXPERIMENTAL. Recovers from the latch: the platform stops the latched work and tears down its channel
/// and channel group, the first bytes of every parked buffer are read twice over an interval by the CPU
/// and must not change, and only then is every buffer of the session released (the parked ones with the
/// rest) and the device closed, and the latch cleared. Takes the lock itself: call it without the lock (a
/// caller that holds it is refused, stage `lock`). Returns 0: the device is closed, the next open reopens
/// it, and every handle of the old device is stale. Returns -1 with stage `recover` when the process is
/// not latched, when the platform cannot stop the work or refused a step of it, or when a parked buffer
/// still changed after the stop: the process is then still latched and nothing was released.
#[no_mangle]
pub extern "C" fn omega_gpu_session_recover() -> c_int {
    status("omega_gpu_session_recover", || runtime().recover().map(|_| ()))
}

/// STABLE. Device opens so far in this process (a persistent session shows 1). Any thread.
#[no_mangle]
pub extern "C" fn omega_gpu_session_open_count() -> u32 {
    guard("omega_gpu_session_open_count", 0, || runtime().open_count())
}

/// STABLE. Sets the process-wide marker-poll spin window in microseconds, used by every launch whose own
/// `spin_us` is 0; 0 (the default) keeps the platform's sleep-poll, its default wait: a brief spin of the
/// platform's length, then yields, then sleeps that grow with the time waited (timer slack lowered), so a
/// short kernel is still seen within microseconds. A window replaces the brief spin. Returns 0, or -1
/// (stage `set spin`, setting unchanged) above `OMEGA_GPU_SESSION_MAX_SPIN_US`. Any thread.
#[no_mangle]
pub extern "C" fn omega_gpu_session_set_spin_us(us: u32) -> c_int {
    status("omega_gpu_session_set_spin_us", || runtime().set_spin_us(us))
}

/// STABLE. The process-wide spin window set by `omega_gpu_session_set_spin_us`. Any thread.
#[no_mangle]
pub extern "C" fn omega_gpu_session_spin_us() -> u32 {
    guard("omega_gpu_session_spin_us", 0, || runtime().spin_us())
}

// ----- memory --------------------------------------------------------------------------------------------

/// Allocates through `alloc` into `*out` (zeroed on failure).
///
/// # Safety
/// - `out` is NULL or points to a writable, aligned `OmegaGpuMem`.
unsafe fn alloc_into(stage: Stage, out: *mut GpuMem, alloc: impl FnOnce() -> Result<GpuMem>) -> Result<()> {
    // SAFETY: by the caller's promise `out` is NULL or points to a writable OmegaGpuMem.
    let out = unsafe { out.as_mut() }.ok_or(null(stage, "out"))?;
    *out = GpuMem::NONE;
    *out = alloc()?;
    Ok(())
}

/// STABLE. A GPU-uncached DATA buffer of at least `bytes` bytes (rounded up to a page; 0 gets one page),
/// CPU and GPU read/write, written to `*out`. Caller holds the lock, device open, not latched. Returns 0;
/// -1 with the stage named on failure (`*out` zeroed). A driver refusal is counted in
/// `OmegaGpuAllocStats.alloc_failures`. A size whose rounding overflows or whose total passes
/// `PTRDIFF_MAX` (`SIZE_MAX`, say) is refused (`platform: OMEGA_GPU_PLAT_OVERFLOW`) in every build.
///
/// # Safety
/// - `out` is NULL (refused) or points to a writable, aligned `OmegaGpuMem`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_session_alloc(bytes: usize, out: *mut GpuMem) -> c_int {
    // SAFETY: forwarded from the caller.
    status("omega_gpu_session_alloc", || unsafe { alloc_into(Stage::Alloc, out, || runtime().alloc(bytes)) })
}

/// STABLE. A CODE buffer (CPU writes, GPU executes, GPU never writes) for `code_size` bytes plus the
/// platform's zero-filled prefetch tail (at least `OMEGA_GPU_CODE_PREFETCH_TAIL`), rounded up to a page
/// (`omega_gpu_code_alloc_bytes`). The
/// caller writes the code to `out->cpu` and calls `omega_gpu_session_sync_to_gpu`. Same rules and return
/// values as `omega_gpu_session_alloc`; a `code_size` whose sum with the tail overflows is refused too
/// (`platform: OMEGA_GPU_PLAT_OVERFLOW`).
///
/// # Safety
/// - `out` is NULL (refused) or points to a writable, aligned `OmegaGpuMem`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_session_alloc_code(code_size: usize, out: *mut GpuMem) -> c_int {
    // SAFETY: forwarded from the caller.
    status("omega_gpu_session_alloc_code", || unsafe {
        alloc_into(Stage::Alloc, out, || runtime().alloc_code(code_size))
    })
}

/// EXPERIMENTAL. A GPU-cached DATA buffer for write-once, GPU-read-only, never-polled contents (weights):
/// the GPU may not write it. The API cannot check that the contents stay unchanged after the first launch
/// that reads them; the caller must. Same rules and return values as `omega_gpu_session_alloc`.
///
/// # Safety
/// - `out` is NULL (refused) or points to a writable, aligned `OmegaGpuMem`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_session_alloc_cached(bytes: usize, out: *mut GpuMem) -> c_int {
    // SAFETY: forwarded from the caller.
    status("omega_gpu_session_alloc_cached", || unsafe {
        alloc_into(Stage::Alloc, out, || runtime().alloc_cached(bytes))
    })
}

/// EXPERIMENTAL. A device-only DATA buffer: GPU read/write, no CPU view (`out->cpu` is NULL), for
/// contents the CPU only moves in and out (weights, activations). Nothing of the host is pinned or mapped
/// for it, so its size is bounded by device memory alone. Move bytes with `omega_gpu_session_write` and
/// `omega_gpu_session_read`; its syncs are no-ops. Same rules and return values as
/// `omega_gpu_session_alloc`.
///
/// # Safety
/// - `out` is NULL (refused) or points to a writable, aligned `OmegaGpuMem`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_session_alloc_device(bytes: usize, out: *mut GpuMem) -> c_int {
    // SAFETY: forwarded from the caller.
    status("omega_gpu_session_alloc_device", || unsafe {
        alloc_into(Stage::Alloc, out, || runtime().alloc_device(bytes))
    })
}

/// STABLE. Releases `*m` to the platform and zeroes it. Caller holds the lock. After an uncertain
/// completion the buffer is parked instead: kept allocated, never released, counted by
/// `omega_gpu_session_parked`, and `*m` keeps its handle for `omega_gpu_session_is_parked`. A stale
/// handle (freed already, or from a closed device), a live handle whose `va` is not its buffer's
/// (`free: handle ... is live but names the buffer at ...`) or a closed session is refused: nothing is
/// released, the refusal is counted (`OmegaGpuAllocStats.stale_refusals`), `*m` is zeroed and the stage is
/// in `omega_gpu_session_last_error()`. A zeroed `*m` is a no-op. The session's own buffers (the launch
/// buffer of `OmegaGpuSession`, a command list's stamp area) are refused: nothing released or counted,
/// `*m` left as it was. Without the lock: refused, `*m` left as it was. An on-close hook may call it.
///
/// # Safety
/// - `m` is NULL (refused) or points to a writable, aligned `OmegaGpuMem`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_session_free(m: *mut GpuMem) {
    or("omega_gpu_session_free", (), || {
        // SAFETY: by the caller's promise `m` is NULL or points to a writable OmegaGpuMem.
        let m = unsafe { m.as_mut() }.ok_or(null(Stage::Free, "m"))?;
        runtime().free(m)
    })
}

/// STABLE. Makes CPU writes to the whole buffer visible to the device (platform SYNC). Caller holds the
/// lock. Returns 0, also for a buffer with no CPU view; -1 with the stage named when refused (a stale
/// handle, a latched process) or when there is no device.
///
/// # Safety
/// - `m` is NULL (refused) or points to a readable, aligned `OmegaGpuMem`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_session_sync_to_gpu(m: *const GpuMem) -> c_int {
    status("omega_gpu_session_sync_to_gpu", || {
        // SAFETY: by the caller's promise `m` is NULL or points to a readable OmegaGpuMem.
        let m = unsafe { m.as_ref() }.ok_or(null(Stage::Sync, "m"))?;
        runtime().sync_to_gpu(m)
    })
}

/// STABLE. Makes device writes to the whole buffer visible to the CPU. Same rules and return values as
/// `omega_gpu_session_sync_to_gpu`.
///
/// # Safety
/// - `m` is NULL (refused) or points to a readable, aligned `OmegaGpuMem`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_session_sync_to_cpu(m: *const GpuMem) -> c_int {
    status("omega_gpu_session_sync_to_cpu", || {
        // SAFETY: by the caller's promise `m` is NULL or points to a readable OmegaGpuMem.
        let m = unsafe { m.as_ref() }.ok_or(null(Stage::Sync, "m"))?;
        runtime().sync_to_cpu(m)
    })
}

/// EXPERIMENTAL. Copies `bytes` bytes from `src` into `*m` at byte `offset`, visible to the device on
/// return: through the CPU view and a sync for a buffer that has one, through the platform's staging for
/// a device-only one. Caller holds the lock, device open, not latched. Returns 0 (also for 0 bytes, when
/// `src` may be NULL); -1 with the stage (`write`) when refused: a stale handle, a range past the buffer,
/// a NULL `src`, a latched process, or the platform's copy failing.
///
/// # Safety
/// - `m` is NULL (refused) or points to a readable, aligned `OmegaGpuMem`.
/// - `src` is NULL (refused unless `bytes` is 0) or points to `bytes` readable bytes (bytes are aligned at
///   any address).
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_session_write(
    m: *const GpuMem,
    offset: usize,
    src: *const c_void,
    bytes: usize,
) -> c_int {
    status("omega_gpu_session_write", || {
        // SAFETY: by the caller's promise `m` is NULL or points to a readable OmegaGpuMem.
        let m = unsafe { m.as_ref() }.ok_or(null(Stage::Write, "m"))?;
        let src: &[u8] = match (src.is_null(), bytes) {
            (_, 0) => &[],
            (true, _) => return Err(null(Stage::Write, "src")),
            // SAFETY: by the caller's promise `src` points to `bytes` readable bytes; a buffer's views are
            // handed out only as raw pointers, so no Rust reference aliases them while this slice lives.
            (false, n) => unsafe { core::slice::from_raw_parts(src.cast::<u8>(), n) },
        };
        runtime().write(m, offset, src)
    })
}

/// EXPERIMENTAL. Copies `bytes` bytes of `*m` at byte `offset` into `dst`, as the device left them: a
/// sync and the CPU view for a buffer that has one, the platform's staging for a device-only one. Same
/// rules and return values as `omega_gpu_session_write` (stage `read`).
///
/// # Safety
/// - `m` is NULL (refused) or points to a readable, aligned `OmegaGpuMem`.
/// - `dst` is NULL (refused unless `bytes` is 0) or points to `bytes` writable bytes (bytes are aligned at
///   any address) that no other thread reads or writes during the call.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_session_read(
    m: *const GpuMem,
    offset: usize,
    dst: *mut c_void,
    bytes: usize,
) -> c_int {
    status("omega_gpu_session_read", || {
        // SAFETY: by the caller's promise `m` is NULL or points to a readable OmegaGpuMem.
        let m = unsafe { m.as_ref() }.ok_or(null(Stage::Read, "m"))?;
        let dst: &mut [u8] = match (dst.is_null(), bytes) {
            (_, 0) => &mut [],
            (true, _) => return Err(null(Stage::Read, "dst")),
            // SAFETY: by the caller's promise `dst` points to `bytes` writable bytes no one else touches
            // during the call; a buffer's views are raw pointers only, so nothing aliases this slice.
            (false, n) => unsafe { core::slice::from_raw_parts_mut(dst.cast::<u8>(), n) },
        };
        runtime().read(m, offset, dst)
    })
}

/// STABLE. Makes `s->mem` at least `bytes` long: reallocated when it grows (the new buffer first, so a
/// failed grow keeps the old one), contents not kept. `*s` must be zero-initialised before first use.
/// Caller holds the lock, also for a request that fits; device open. Returns 0 or -1; with a reservation
/// active, a request past the reserved size (the size given to `omega_gpu_session_scratch_reserve`, not
/// the page it rounds to) returns `OMEGA_GPU_SESSION_SCRATCH_RESERVED` and allocates nothing. A buffer of a
/// device closed since is never handed out again: it is replaced, or, under a reservation, refused (stage
/// `scratch`); so is a parked one.
///
/// # Safety
/// - `s` is NULL (refused) or points to a writable, aligned `OmegaGpuScratch` that is zeroed or was only
///   changed by these calls.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_session_scratch(s: *mut Scratch, bytes: usize) -> c_int {
    status("omega_gpu_session_scratch", || {
        // SAFETY: by the caller's promise `s` is NULL or points to a writable OmegaGpuScratch.
        let s = unsafe { s.as_mut() }.ok_or(null(Stage::Scratch, "s"))?;
        runtime().scratch(s, bytes)
    })
}

/// STABLE. Releases the scratch buffer (as `omega_gpu_session_free` does) and zeroes `*s`, unless the
/// buffer is still there: a refused free (no lock) leaves `*s` as it was, and a parked one (after a latch)
/// keeps `*s` and its handle for `omega_gpu_session_is_parked`.
///
/// # Safety
/// - `s` is NULL (refused) or points to a writable, aligned `OmegaGpuScratch`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_session_scratch_free(s: *mut Scratch) {
    or("omega_gpu_session_scratch_free", (), || {
        // SAFETY: by the caller's promise `s` is NULL or points to a writable OmegaGpuScratch.
        let s = unsafe { s.as_mut() }.ok_or(null(Stage::Scratch, "s"))?;
        runtime().scratch_free(s)
    })
}

/// EXPERIMENTAL. Grows `s` to `bytes` now and reserves it: later `omega_gpu_session_scratch` requests up
/// to `bytes` (not the page-rounded capacity) allocate nothing, past it they return
/// `OMEGA_GPU_SESSION_SCRATCH_RESERVED`. For a serving loop that must make no driver call after warm-up.
/// Caller holds the lock. Returns 0 or -1 (nothing reserved).
///
/// # Safety
/// - `s` is NULL (refused) or points to a writable, aligned `OmegaGpuScratch`, zeroed or changed only by
///   these calls.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_session_scratch_reserve(s: *mut Scratch, bytes: usize) -> c_int {
    status("omega_gpu_session_scratch_reserve", || {
        // SAFETY: by the caller's promise `s` is NULL or points to a writable OmegaGpuScratch.
        let s = unsafe { s.as_mut() }.ok_or(null(Stage::Scratch, "s"))?;
        runtime().scratch_reserve(s, bytes)
    })
}

/// EXPERIMENTAL. Ends the reservation of `s`; the buffer stays. Caller holds the lock: without it, refused
/// (stage `lock`) and the reservation stays.
///
/// # Safety
/// - `s` is NULL (refused) or points to a writable, aligned `OmegaGpuScratch`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_session_scratch_unreserve(s: *mut Scratch) {
    or("omega_gpu_session_scratch_unreserve", (), || {
        // SAFETY: by the caller's promise `s` is NULL or points to a writable OmegaGpuScratch.
        let s = unsafe { s.as_mut() }.ok_or(null(Stage::Scratch, "s"))?;
        runtime().scratch_unreserve(s)
    })
}

/// STABLE. Copies the session layer's allocation counters (since the process started) to `*out`.
///
/// # Safety
/// - `out` is NULL (refused) or points to a writable, aligned `OmegaGpuAllocStats`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_session_alloc_stats(out: *mut AllocStats) {
    or("omega_gpu_session_alloc_stats", (), || {
        // SAFETY: by the caller's promise `out` is NULL or points to a writable OmegaGpuAllocStats.
        let out = unsafe { out.as_mut() }.ok_or(null(Stage::AllocStats, "out"))?;
        *out = runtime().alloc_stats();
        Ok(())
    })
}

/// EXPERIMENTAL. Free and total device memory now, as the platform reports them, into `*out` (on the
/// GPU the driver's figures, counting every process's allocations; the session's own chunks count as
/// used). Caller holds the lock, device open. Returns 0; -1 with the stage (`mem info`) when refused or
/// when the platform cannot say (`*out` zeroed).
///
/// # Safety
/// - `out` is NULL (refused) or points to a writable, aligned `OmegaGpuMemInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_session_mem_info(out: *mut MemInfo) -> c_int {
    status("omega_gpu_session_mem_info", || {
        // SAFETY: by the caller's promise `out` is NULL or points to a writable OmegaGpuMemInfo.
        let out = unsafe { out.as_mut() }.ok_or(null(Stage::MemInfo, "out"))?;
        *out = MemInfo::default();
        *out = runtime().mem_info()?;
        Ok(())
    })
}

// ----- launch --------------------------------------------------------------------------------------------

/// STABLE. Submits one launch and polls both completion markers, so it returns when the chip is done.
/// Caller holds the lock, device open, not latched. Returns 0; -1 with the stage named on failure (stage
/// `launch arguments` when `L` fails the checks and nothing ran); `OMEGA_GPU_SESSION_CANCELLED` when a
/// cancel request was seen (before submit nothing ran; after submit the process latched). A marker
/// timeout latches the process. On success `*elapsed_ns` (when given) is added to, not set, and
/// `*marker_out` (when given) receives the first marker word observed.
///
/// # Safety
/// - `L` is NULL (refused) or points to a readable, aligned `OmegaGpuLaunch` whose `args` is NULL (refused)
///   or points to `n_args` readable, aligned `uint32_t` words.
/// - `elapsed_ns` and `marker_out` are each NULL or point to a writable, aligned object of their type.
#[no_mangle]
#[allow(non_snake_case)]
pub unsafe extern "C" fn omega_gpu_session_launch(
    L: *const RawLaunch,
    elapsed_ns: *mut u64,
    marker_out: *mut u32,
) -> c_int {
    status("omega_gpu_session_launch", || {
        let rt = runtime();
        // The core's order: the lock, then the latch, then the arguments.
        rt.require_lock(Stage::Launch)?;
        if rt.is_blocked() {
            return Err(Error::Latched(Stage::Launch));
        }
        // SAFETY: by the caller's promise `L` is NULL or points to a readable OmegaGpuLaunch.
        let l = unsafe { L.as_ref() }.ok_or(Error::LaunchArguments(crate::error::LaunchArgError::NullLaunch))?;
        // SAFETY: by the caller's promise `l.args` is NULL or points to `l.n_args` words, valid for this
        // call (the spec does not outlive it).
        let spec = unsafe { LaunchSpec::from_raw(l) }?;
        let c = rt.launch(&spec)?;
        // SAFETY: by the caller's promise each is NULL or points to a writable object of its type.
        unsafe {
            if let Some(e) = elapsed_ns.as_mut() {
                *e = e.wrapping_add(c.elapsed_ns);
            }
            if let Some(m) = marker_out.as_mut() {
                *m = c.marker;
            }
        }
        Ok(())
    })
}

/// EXPERIMENTAL. Asks the launch in progress, or the next one, to stop: before submit it returns
/// `OMEGA_GPU_SESSION_CANCELLED` and runs nothing; after submit the chip cannot be stopped, so the launch
/// returns `OMEGA_GPU_SESSION_CANCELLED` and the process latches. Any thread, no lock.
#[no_mangle]
pub extern "C" fn omega_gpu_session_cancel() {
    guard("omega_gpu_session_cancel", (), || runtime().cancel())
}

// ----- errors and the latch ------------------------------------------------------------------------------

/// STABLE. The stage and text of the most recent failure of any call in the process, "" if none. Points
/// into one process-wide buffer that the next call to this function overwrites: read it under the lock,
/// before the next call.
#[no_mangle]
pub extern "C" fn omega_gpu_session_last_error() -> *const c_char {
    guard("omega_gpu_session_last_error", c"internal: panic in omega_gpu_session_last_error".as_ptr(), last_error_ptr)
}

/// STABLE. Copies the parked-buffer report to `*out`: buffers kept allocated after an uncertain
/// completion, never returned to the platform. At the latch the session parks what the device may still
/// touch: its launch buffer and the stamp area of a command list whose submission latched (listed), and
/// the platform's own queue buffers (ring, pushbuffers, QMDs, constant banks; counted in `untracked`, they
/// have no handle). Every later free parks too.
///
/// # Safety
/// - `out` is NULL (refused) or points to a writable, aligned `OmegaGpuParkStats`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_session_parked(out: *mut ParkStats) {
    or("omega_gpu_session_parked", (), || {
        // SAFETY: by the caller's promise `out` is NULL or points to a writable OmegaGpuParkStats.
        let out = unsafe { out.as_mut() }.ok_or(null(Stage::Parked, "out"))?;
        *out = runtime().parked();
        Ok(())
    })
}

/// STABLE. 1 if this handle is parked and listed (one of the first `OMEGA_GPU_SESSION_PARK_MAX`), else 0.
#[no_mangle]
pub extern "C" fn omega_gpu_session_is_parked(h: Handle) -> c_int {
    guard("omega_gpu_session_is_parked", 0, || c_int::from(runtime().is_parked(h)))
}

// ----- platform ------------------------------------------------------------------------------------------

/// EXPERIMENTAL. Chooses the platform for the next open. With `table` NULL, `name` is a built-in
/// platform: `"sim"` or `"nvidia"`. With a table, `name` is the name the table is known by (what
/// `omega_gpu_session_platform()` returns; 1 to 63 printable ASCII characters, not a built-in's), and
/// `*table` is copied and checked as `omega_gpu_platform_check` checks it: a table lacking a service the
/// session needs, or a function of a service it declares, is refused with the service's name
/// (`platform: OMEGA_GPU_PLAT_MISSING_SERVICE: OMEGA_GPU_SVC_POLL`). Caller holds the lock, the device is
/// closed and the process is not latched. Returns 0, or -1 with the stage named (an unknown name and a
/// refused table are stage `platform`). An installed table's `ctx` belongs to the runtime from then on:
/// it calls `table->release(ctx)` once the table is replaced and no call on it is left; a refused table is
/// not released.
///
/// # Safety
/// - `name` is NULL (refused) or a NUL-terminated string.
/// - `table` is NULL or points to a readable, aligned `OmegaGpuPlatform` that keeps the rules of its Safety
///   section (and of each service struct's) for as long as it stays installed: every function it declares
///   returns normally (no unwinding, no `longjmp` out of it), never calls back into the runtime, and may
///   be called from any thread.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_session_set_platform(name: *const c_char, table: *const OmegaGpuPlatform) -> c_int {
    status("omega_gpu_session_set_platform", || {
        // SAFETY: forwarded from the caller.
        let name = unsafe { c_str(Stage::SetPlatform, "name", name) }?;
        // SAFETY: by the caller's promise `table` is NULL or readable.
        if let Some(table) = unsafe { table.as_ref() } {
            // SAFETY: forwarded from the caller.
            return unsafe { super::platform::install_table(name, table) };
        }
        runtime().set_platform(PlatformKind::parse(name)?)
    })
}

/// EXPERIMENTAL. The installed platform's name (`"sim"`, `"nvidia"`, or the name a table was installed
/// under), installing the environment's choice first (`OMEGA_PLATFORM`, else `nvidia` where
/// `/dev/nvidiactl` exists, else `sim`). NULL when none can be installed (stage `platform`). The string
/// is static. Any thread.
#[no_mangle]
pub extern "C" fn omega_gpu_session_platform() -> *const c_char {
    or("omega_gpu_session_platform", ptr::null(), || {
        Ok(match runtime().installed()?.name() {
            "sim" => c"sim".as_ptr(),
            "nvidia" => c"nvidia".as_ptr(),
            other => super::platform::table_name(other).unwrap_or(c"unknown".as_ptr()),
        })
    })
}

/// EXPERIMENTAL. Argument words that precede a launch's own in constant bank 0: the launch's `args` are
/// written at word `omega_gpu_session_submit_prefix_words()` of the bank (132, byte 0x210, on Hopper). A
/// program that builds its own machine code reads its parameters from there. 0 with no platform.
#[no_mangle]
pub extern "C" fn omega_gpu_session_submit_prefix_words() -> u32 {
    guard("omega_gpu_session_submit_prefix_words", 0, || runtime().param_prefix_words())
}

/// EXPERIMENTAL. How a launch learns its completion (`OMEGA_GPU_COMPLETION_*`): by polling a marker word,
/// with or without a spin window first, never by an interrupt. `OMEGA_GPU_COMPLETION_NONE` with no
/// platform or one without the POLL service. Any thread.
#[no_mangle]
pub extern "C" fn omega_gpu_session_completion_mode() -> u32 {
    guard("omega_gpu_session_completion_mode", OMEGA_GPU_COMPLETION_NONE, || {
        let rt = runtime();
        match (rt.polls_completions(), rt.spin_us() > 0) {
            (true, true) => OMEGA_GPU_COMPLETION_SPIN_POLL,
            (true, false) => OMEGA_GPU_COMPLETION_SLEEP_POLL,
            (false, _) => OMEGA_GPU_COMPLETION_NONE,
        }
    })
}

/// EXPERIMENTAL. Nanoseconds on the platform clock, the one launches are timed with (virtual on the
/// simulator); 0 with no platform. Any thread.
#[no_mangle]
pub extern "C" fn omega_gpu_session_now_ns() -> u64 {
    guard("omega_gpu_session_now_ns", 0, || runtime().now_ns())
}

/// EXPERIMENTAL. What the open device reports, copied to `*out`. Returns 0, or -1 (stage `device query`)
/// when the device is not open. Any thread; the answer is about the device open at the time of the call.
///
/// # Safety
/// - `out` is NULL (refused) or points to a writable, aligned `OmegaGpuDeviceInfo`.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_device_query(out: *mut OmegaGpuDeviceInfo) -> c_int {
    status("omega_gpu_device_query", || {
        // SAFETY: by the caller's promise `out` is NULL or points to a writable OmegaGpuDeviceInfo.
        let out = unsafe { out.as_mut() }.ok_or(null(Stage::DeviceQuery, "out"))?;
        let d = runtime().device_info().ok_or(Error::NotOpen(Stage::DeviceQuery))?;
        *out = OmegaGpuDeviceInfo::from_info(&d);
        Ok(())
    })
}

// ----- host memory ---------------------------------------------------------------------------------------

fn host(stage: Stage, bytes: usize, zeroed: bool) -> Result<*mut c_void> {
    let p = runtime().host_alloc(bytes, zeroed);
    if p.is_null() {
        return Err(Error::Setting { stage, detail: SettingError::NoHostMemory(bytes) });
    }
    Ok(p.cast())
}

/// EXPERIMENTAL. `bytes` of uninitialised CPU-only memory from the platform HOST_MEM service, aligned for
/// any scalar; NULL (stage `host alloc`) on failure. Release with `omega_gpu_host_free`. Any thread.
#[no_mangle]
pub extern "C" fn omega_gpu_host_alloc(bytes: usize) -> *mut c_void {
    or("omega_gpu_host_alloc", ptr::null_mut(), || host(Stage::HostAlloc, bytes, false))
}

/// EXPERIMENTAL. `count * size` bytes of zeroed CPU-only memory from the platform HOST_MEM service; NULL
/// (stage `host alloc`) on failure or when the product overflows. Any thread.
#[no_mangle]
pub extern "C" fn omega_gpu_host_calloc(count: usize, size: usize) -> *mut c_void {
    or("omega_gpu_host_calloc", ptr::null_mut(), || {
        let overflows =
            Error::Setting { stage: Stage::HostAlloc, detail: SettingError::HostSizeOverflows { count, size } };
        host(Stage::HostAlloc, count.checked_mul(size).ok_or(overflows)?, true)
    })
}

/// EXPERIMENTAL. Releases memory from `omega_gpu_host_alloc` or `omega_gpu_host_calloc`; NULL is a no-op.
///
/// # Safety
/// - `p` is NULL or came from `omega_gpu_host_alloc`/`omega_gpu_host_calloc` under the platform installed
///   now, and was not released since.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_host_free(p: *mut c_void) {
    // SAFETY: forwarded from the caller.
    guard("omega_gpu_host_free", (), || unsafe { runtime().host_free(p.cast()) })
}

// ----- INTERNAL ------------------------------------------------------------------------------------------

/// INTERNAL. Sets the process-wide error text that `omega_gpu_session_last_error` returns: a library names
/// its failure stage through it (`"matmul: ..."`). NULL sets "".
///
/// # Safety
/// - `text` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_session_set_error(text: *const c_char) {
    guard("omega_gpu_session_set_error", (), || {
        if text.is_null() {
            record(&"");
            return;
        }
        // SAFETY: non-null (checked) and, by the caller's promise, NUL-terminated.
        let t = unsafe { core::ffi::CStr::from_ptr(text) };
        record(&t.to_string_lossy());
    })
}

/// INTERNAL. Registers `hook(ctx)` to run when the device closes, before any buffer is released (a library
/// drops its resident kernels there); it runs once, on the thread that calls close, with the lock held.
/// A hook may release buffers (`omega_gpu_session_free`, `omega_gpu_session_scratch_free`) and read state;
/// every other call that needs the lock is refused inside it (stage `on close`), so it cannot launch or
/// latch, taking the lock is refused instead of waiting forever, unlock is refused, and so is close. Up to
/// `OMEGA_GPU_SESSION_ON_CLOSE_MAX` hooks; returns 0, or -1 (stage `on close`) past that or for a NULL
/// hook.
///
/// # Safety
/// - `hook` is NULL (refused) or a function that may be called once with `ctx` from any thread, under the
///   session lock. It may release buffers and read state; every other call that needs the lock (a launch,
///   an allocation, close, lock, unlock) is refused from inside it (stage `on close`).
/// - `hook` returns normally: it does not unwind (a C++ exception) or `longjmp` out through Omega.
/// - `ctx` is whatever `hook` needs it to be until `hook` has run (at the next close) or the process ends;
///   Omega only passes it on, and never reads or frees it.
#[no_mangle]
pub unsafe extern "C" fn omega_gpu_session_on_close(
    hook: Option<unsafe extern "C" fn(ctx: *mut c_void)>,
    ctx: *mut c_void,
) -> c_int {
    status("omega_gpu_session_on_close", || {
        let hook = hook.ok_or(null(Stage::OnClose, "hook"))?;
        let h = CHook { hook, ctx };
        runtime().on_close(Box::new(move || {
            let h = &h;
            // SAFETY: the registrant promised `hook` may be called once with `ctx` from this thread under
            // the lock; close runs every hook once.
            unsafe { (h.hook)(h.ctx) }
        }))
    })
}
